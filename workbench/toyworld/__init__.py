"""The toy world of the embedded model: scenes, prompts, renders (`world`) and reading them back (`perception`)."""
