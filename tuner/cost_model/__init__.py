"""The cost model: program features and the model that ranks candidates by them."""
