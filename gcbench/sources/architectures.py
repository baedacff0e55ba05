"""The zoo's network architectures: plain-torch modules with torchvision's parameter names and initialisation.

:mod:`gcbench.sources.zoo` builds them into models with seeds and batches; the citations and parameter counts of
each are in its docstring.  The train tasks (:mod:`gcbench.workloads.tasks`) use the ``digits``, ``digits_cnn`` and
``charlstm`` networks on their real data.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from gcbench.core.errors import ParamError

# --------------------------------------------------------------------------------------------
# ResNet (torchvision layout and initialisation)


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3×3 convolutions with an identity (or 1×1 projection) shortcut (ResNet-18/34)."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1×1 → 3×3 (strided, v1.5) → 1×1 ×4 bottleneck (ResNet-50/101/152)."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv1x1(cin, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ImageNet ResNet with torchvision's module names (``layer1.0.conv1.weight`` …)."""

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], layers: tuple[int, int, int, int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(self, block: type[BasicBlock] | type[Bottleneck], planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(_conv1x1(self.inplanes, planes * block.expansion, stride), nn.BatchNorm2d(planes * block.expansion))
        layers: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --------------------------------------------------------------------------------------------
# VGG-16 (torchvision layout and initialisation)

_VGG16_CFG: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG(nn.Module):
    """VGG configuration D without batch norm; ``features.N`` / ``classifier.N`` names as torchvision."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in _VGG16_CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        # adaptive pooling to 7×7 lets small test images through the 25088-wide classifier
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)  # type: ignore[arg-type]  # every conv above is built with a bias
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --------------------------------------------------------------------------------------------
# LSTM language model (Zaremba et al. 2014, medium)


class LSTMLanguageModel(nn.Module):
    """Embedding → dropout → 2-layer LSTM → dropout → linear decoder (untied), logits ``(B, T, V)``.

    Every batch starts from a zero hidden state (no truncated-BPTT carry between batches), so a
    batch's gradient depends on that batch alone, which keeps worker gradients independent.
    """

    def __init__(self, vocab: int = 10_000, hidden: int = 650, layers: int = 2, dropout: float = 0.5, init_range: float = 0.05) -> None:
        super().__init__()
        self.encoder = nn.Embedding(vocab, hidden)
        self.drop = nn.Dropout(dropout)
        # nn.LSTM applies dropout between layers only (one layer: none, and it warns if asked)
        self.rnn = nn.LSTM(hidden, hidden, layers, dropout=dropout if layers > 1 else 0.0, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)
        for p in self.parameters():
            nn.init.uniform_(p, -init_range, init_range)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.drop(self.encoder(tokens)))
        return self.decoder(self.drop(out))


# --------------------------------------------------------------------------------------------
# small GPT-style decoder


class _Block(nn.Module):
    """Pre-LayerNorm decoder block: causal self-attention and a 4× GELU MLP, both residual."""

    def __init__(self, d_model: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(att.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TinyGPT(nn.Module):
    """Token + learned position embeddings, ``layers`` blocks, final LayerNorm, untied linear head."""

    def __init__(self, vocab: int = 8000, seq_len: int = 128, d_model: int = 256, heads: int = 4, layers: int = 4,
                 dropout: float = 0.1) -> None:
        super().__init__()
        if d_model % heads:
            raise ParamError(f"transformer: d_model ({d_model}) must be divisible by heads ({heads})")
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(d_model, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        # GPT-2 initialisation: N(0, 0.02) weights, zero biases
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.tok(tokens) + self.pos(pos))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


# --------------------------------------------------------------------------------------------
# MLP


class MLP(nn.Module):
    """Fully connected ReLU network, ``fc0 … fcN`` layers."""

    def __init__(self, sizes: tuple[int, ...] = (784, 512, 256, 10)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


# --------------------------------------------------------------------------------------------
# small CNN


class SmallCNN(nn.Module):
    """CIFAR-shaped CNN: three conv3×3-ReLU-maxpool stages (``convs.0..2``), then ``fc0`` and ``fc1``."""

    def __init__(self, num_classes: int = 10, image_size: int = 32, channels: tuple[int, ...] = (32, 64, 128), hidden: int = 256) -> None:
        super().__init__()
        cins = (3, *channels[:-1])
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(cins, channels, strict=True))
        side = image_size
        for _ in channels:
            side //= 2
        self.fc0 = nn.Linear(channels[-1] * side * side, hidden)
        self.fc1 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = F.max_pool2d(F.relu(conv(x)), 2)
        return self.fc1(F.relu(self.fc0(x.flatten(1))))


# --------------------------------------------------------------------------------------------
# the models of the train tasks (digits, digits_cnn, charlstm): one definition, used by the tasks
# (gcbench.workloads.tasks) on their real data and by the zoo on synthetic batches of the same shapes,
# so that `gcbench advise --convergence` can price a step of the model a convergence run trained


def digits_build() -> nn.Module:
    """The ``digits`` task's MLP 64-256-128-10 (50,826 parameters) on flattened 8×8 images."""
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def digits_cnn_build() -> nn.Module:
    """The ``digits_cnn`` task's CNN: conv3×3-16, conv3×3-32, maxpool 2, FC 512-64-10, on flattened 8×8 images."""
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))


class CharLSTM(nn.Module):
    """Embedding → one-layer LSTM → linear over the vocabulary (the ``charlstm`` task's character language model)."""

    def __init__(self, vocab: int, embed: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(x))
        return self.head(h)
