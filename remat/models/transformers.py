"""Today's transformer models, written here (no downloads): a GPT-2-style decoder and a BERT-style encoder.

Both follow the published architectures at their default sizes - GPT-2 small
(Radford et al. 2019: 12 layers, d=768, 12 heads, context 1024, vocabulary
50257, pre-LayerNorm blocks, GELU MLP, output head tied to the token embedding)
and BERT-base (Devlin et al. 2019: 12 layers, d=768, 12 heads, FFN 3072,
vocabulary 30522, post-LayerNorm blocks, a masked-LM head tied to the word
embedding) - and every size is a keyword argument, so tests and the 2-core
defaults use small ones. Attention is ``F.scaled_dot_product_attention``
(causal for GPT-2; BERT masks padding with the ``attention_mask`` input).
Dropout (0.1 by default) is active in training, including on the attention
probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused q/k/v projection."""

    def __init__(self, d_model: int, n_head: int, dropout: float, causal: bool) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} must be a multiple of n_head={n_head}")
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.n_head, self.dropout, self.causal = n_head, dropout, causal

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.up, self.act, self.down = nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class DecoderBlock(nn.Module):
    """GPT-2's pre-LN block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, d_model: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_head, dropout, causal=True)
        self.mlp = MLP(d_model, 4 * d_model)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop1(self.attn(self.ln1(x)))
        return x + self.drop2(self.mlp(self.ln2(x)))


class GPT2(nn.Module):
    """A GPT-2-style decoder-only language model: token ids ``(B, T)`` to next-token logits ``(B, T, vocab)``."""

    def __init__(self, vocab_size: int = 50257, context: int = 1024, n_layer: int = 12, d_model: int = 768,
                 n_head: int = 12, dropout: float = 0.1) -> None:
        super().__init__()
        self.vocab_size, self.context = vocab_size, context
        self.wte, self.wpe = nn.Embedding(vocab_size, d_model), nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.wte(input_ids) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class EncoderBlock(nn.Module):
    """BERT's post-LN block: ``ln(x + attn(x))``, then ``ln(x + ffn(x))``."""

    def __init__(self, d_model: int, n_head: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.attn = SelfAttention(d_model, n_head, dropout, causal=False)
        self.mlp = MLP(d_model, d_ff)
        self.ln1, self.ln2 = nn.LayerNorm(d_model, eps=1e-12), nn.LayerNorm(d_model, eps=1e-12)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.drop1(self.attn(x, mask)))
        return self.ln2(x + self.drop2(self.mlp(x)))


@dataclass
class MaskedLMOutput:
    """What :class:`BertEncoder` returns, like a Hugging Face model-output object."""

    logits: torch.Tensor
    last_hidden_state: torch.Tensor


class BertEncoder(nn.Module):
    """A BERT-style encoder with a masked-LM head: ``(input_ids, attention_mask)`` to a :class:`MaskedLMOutput`.

    ``attention_mask`` is ``(B, T)`` bool, True for real tokens; padded keys get
    no attention.
    """

    def __init__(self, vocab_size: int = 30522, max_len: int = 512, n_layer: int = 12, d_model: int = 768,
                 n_head: int = 12, d_ff: int = 3072, dropout: float = 0.1) -> None:
        super().__init__()
        self.vocab_size, self.context = vocab_size, max_len
        self.word, self.position = nn.Embedding(vocab_size, d_model), nn.Embedding(max_len, d_model)
        self.ln_emb, self.drop = nn.LayerNorm(d_model, eps=1e-12), nn.Dropout(dropout)
        self.layers = nn.ModuleList(EncoderBlock(d_model, n_head, d_ff, dropout) for _ in range(n_layer))
        self.transform = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.LayerNorm(d_model, eps=1e-12))
        self.decoder = nn.Linear(d_model, vocab_size)
        self.decoder.weight = self.word.weight  # tied, as in BERT

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> MaskedLMOutput:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.ln_emb(self.word(input_ids) + self.position(pos)))
        mask = attention_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return MaskedLMOutput(logits=self.decoder(self.transform(x)), last_hidden_state=x)


def masked_lm_loss(output: MaskedLMOutput, target: torch.Tensor) -> torch.Tensor:
    """Cross entropy of the masked-LM logits at the positions whose target is not -100."""
    logits = output.logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
