"""Great Expectations gates that stop a stage before bad data reaches an analysis."""
