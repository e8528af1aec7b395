# The jax reader's validation (_validation.pyx): canaries and prepare(), Python-level only (the
# core calls them through the registration); nothing here is cimported by other modules.
