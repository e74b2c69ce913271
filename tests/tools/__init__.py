"""The tool registry: schemas from signatures, validation, policies, results, specs; and the
testing kit."""
