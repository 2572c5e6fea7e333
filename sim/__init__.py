"""The device model. `golden` is the bit-exact numerical reference of the compute unit."""
