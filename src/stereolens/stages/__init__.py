"""One thin module per study's DVC stages: read declared params and inputs, call the library, write, log."""
