"""A word-level language model in the shape of PyTorch's nn.TransformerEncoder tutorial.

Sequence-first batches, a sinusoidal position buffer, a float causal mask built with triu and
masked_fill, SGD with gradient-norm clipping and a StepLR schedule, a no_grad evaluation, and
the best weights kept through torch.save / torch.load of the state dict.
"""

import io
import math

import torch
from torch import Tensor, nn
from torch.nn import TransformerEncoder, TransformerEncoderLayer


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(x + self.pe[: x.size(0)])


class WordModel(nn.Module):
    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, dropout=0.0):
        super().__init__()
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        layer = TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        self.transformer_encoder = TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.embedding = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.linear = nn.Linear(d_model, ntoken)
        initrange = 0.1
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.linear.bias.data.zero_()
        self.linear.weight.data.uniform_(-initrange, initrange)

    def forward(self, src, src_mask=None):
        src = self.pos_encoder(self.embedding(src) * math.sqrt(self.d_model))
        return self.linear(self.transformer_encoder(src, src_mask))


def square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)


def batchify(data, bsz):
    seq_len = data.size(0) // bsz
    return data[: seq_len * bsz].view(bsz, seq_len).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def train_epoch(model, data, bptt, optimizer, ntokens, masked):
    """One pass over `data`; returns every step's loss."""
    model.train()
    criterion = nn.CrossEntropyLoss()
    losses = []
    for i in range(0, data.size(0) - 1, bptt):
        x, targets = get_batch(data, i, bptt)
        mask = square_subsequent_mask(x.size(0)) if masked else None
        loss = criterion(model(x, mask).view(-1, ntokens), targets)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        losses.append(loss.item())
    return losses


def evaluate(model, data, bptt, ntokens, masked):
    model.eval()
    criterion = nn.CrossEntropyLoss()
    total = 0.0
    with torch.no_grad():
        for i in range(0, data.size(0) - 1, bptt):
            x, targets = get_batch(data, i, bptt)
            mask = square_subsequent_mask(x.size(0)) if masked else None
            total += x.size(0) * criterion(model(x, mask).view(-1, ntokens), targets).item()
    return total / (len(data) - 1)


def fit(model, train_data, val_data, bptt, ntokens, epochs, masked, lr=5.0):
    """The tutorial's loop: train, evaluate, keep the best state dict, step the schedule."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.95)
    losses, best, saved = [], float("inf"), None
    for _ in range(epochs):
        losses += train_epoch(model, train_data, bptt, optimizer, ntokens, masked)
        val_loss = evaluate(model, val_data, bptt, ntokens, masked)
        losses.append(val_loss)
        if val_loss < best:
            best, saved = val_loss, io.BytesIO()
            torch.save(model.state_dict(), saved)
        scheduler.step()
    saved.seek(0)
    model.load_state_dict(torch.load(saved))
    return losses, scheduler.get_last_lr()[0]
