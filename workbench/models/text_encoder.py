"""A word-level text encoder small enough to train together with the embedded flow model.

Token embeddings plus a two-layer transformer. It returns what an SD3-style MMDiT consumes: a sequence
of token embeddings (`prompt_embeds`) and one pooled vector (`pooled_prompt_embeds`). Every prompt is
padded to the same length so that padding never changes a prompt's encoding.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import torch
from torch import nn

from workbench.toyworld.world import VOCABULARY, parse_prompt

SPECIAL_TOKENS = ("<pad>", "<bos>")


@dataclass
class TextEncoderConfig:
    """Size of the tiny text encoder (our own design, trained with the embedded model)."""

    max_length: int = 16  # tokens per prompt, <bos> included; the grammar needs at most 14
    width: int = 64  # embedding width; also the MMDiT's joint_attention_dim
    layers: int = 2  # transformer encoder layers
    heads: int = 4  # attention heads
    pooled_dim: int = 64  # width of the pooled vector; the MMDiT's pooled_projection_dim

    def to_dict(self) -> dict:
        return asdict(self)


class WordTokenizer:
    """Maps prompts of the shapes grammar to fixed-length id tensors; "" is the unconditional prompt."""

    def __init__(self, max_length: int = 16):
        self.max_length = max_length
        self.vocab = {w: i for i, w in enumerate(SPECIAL_TOKENS + VOCABULARY)}

    def __call__(self, prompts: list[str]) -> torch.Tensor:
        """(B,) prompts -> (B, max_length) token ids, <bos> first, <pad> after the last word."""
        ids = torch.zeros(len(prompts), self.max_length, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            if prompt.strip():
                parse_prompt(prompt)  # raises a WorkbenchError naming any unknown word
            words = ["<bos>"] + re.findall(r"[a-z]+", prompt.lower())
            words = words[: self.max_length]
            ids[row, : len(words)] = torch.tensor([self.vocab[w] for w in words])
        return ids


class TinyTextEncoder(nn.Module):
    """Token ids (B, L) -> (prompt_embeds (B, L, width), pooled_prompt_embeds (B, pooled_dim))."""

    def __init__(self, config: TextEncoderConfig):
        super().__init__()
        self.config = config
        vocab_size = len(SPECIAL_TOKENS) + len(VOCABULARY)
        self.token_embedding = nn.Embedding(vocab_size, config.width)
        self.position_embedding = nn.Parameter(torch.zeros(config.max_length, config.width))
        layer = nn.TransformerEncoderLayer(config.width, config.heads, 2 * config.width,
                                           dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.width)
        self.pool = nn.Linear(config.width, config.pooled_dim)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.token_embedding(ids) + self.position_embedding[: ids.shape[1]]  # (B, L, D)
        h = self.norm(self.encoder(h))  # (B, L, D)
        keep = (ids != 0).unsqueeze(-1).to(h.dtype)  # (B, L, 1): 0 on padding
        pooled = (h * keep).sum(1) / keep.sum(1)  # (B, D): mean over real tokens
        return h, self.pool(pooled)
