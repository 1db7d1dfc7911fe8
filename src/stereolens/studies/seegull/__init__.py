"""Study `seegull`: does a model's association of identity and attribute follow the locale's human verdicts
(SeeGULL Multilingual, Bhutani et al. 2024)?  See README.md."""
