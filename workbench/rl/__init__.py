"""The RL maths: advantages, objectives, chunking, Monte-Carlo credit. Pure functions over tensors."""
