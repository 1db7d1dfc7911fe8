"""Study ``stereo`` (EspanStereo): human-LLM collaborative stereotype benchmark per country."""
