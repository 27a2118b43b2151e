"""Bad-input sweep 18: the Python API a notebook calls directly (the re-balancing
options and speed monitor, the cost model, clusters), each argument either taken as
meant or refused naming it (the local workers' own are in their cluster's test file)."""
