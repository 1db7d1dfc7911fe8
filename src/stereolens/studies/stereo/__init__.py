"""Study ``stereo`` (seed 003, EspanStereo): human-LLM collaborative stereotype benchmark per country."""
