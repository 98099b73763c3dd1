"""Concrete policies: the embedded tiny model (and its pretraining, text encoder) and diffusers SD3 / FLUX adapters."""
