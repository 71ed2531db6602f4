"""The journal: what every store records, its hash chain, its JSON columns and run files."""
