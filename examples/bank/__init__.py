"""The bank example: the seed's Account aggregate, run by tidings."""
