"""Rewards: one score per generated image, given the prompt it was generated for.

    base.py        the registries, reward specs ("adherence:1,sharpness:0.5"), `build_reward`
    attributes.py  prompt adherence in the toy world (adherence, colour/shape/position/size match)
    pixels.py      prompt-free pixel statistics (sharpness, composition, JPEG size)
    clip.py        CLIPScore and PickScore from a local model folder

Importing the package registers every reward.
"""

from __future__ import annotations

from workbench.rewards import attributes, clip, pixels  # noqa: F401 (registers the rewards)
from workbench.rewards.base import (
                                    MODEL_REWARDS,
                                    REWARDS,
                                    Accepts,
                                    RewardFn,
                                    RewardFunction,
                                    build_reward,
                                    check_folders,
                                    check_reward_images,
                                    default_reward,
                                    folder_args,
                                    model_kind,
                                    parse_reward_spec,
                                    reward_accepts,
                                    reward_names,
                                    rewards_for,
)

__all__ = ["MODEL_REWARDS", "REWARDS", "Accepts", "RewardFn", "RewardFunction", "build_reward", "check_folders",
           "check_reward_images", "default_reward", "folder_args", "model_kind", "parse_reward_spec",
           "reward_accepts", "reward_names", "rewards_for"]
