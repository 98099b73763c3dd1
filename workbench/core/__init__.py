"""Foundation: user-facing errors, named registries, image helpers. Imports nothing else of the workbench."""
