"""parinfo tune: the reference's thread sweep, measured on the user's workload, written as a profile."""
