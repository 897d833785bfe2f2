"""Five model families the replay had not met (issue 31), built here, no downloads.

Each ``build_*`` returns one training step (a callable) of one torch thread's worth, for
``bench/replay_models.py --models vit,mobilenet,moe,unet,tbe`` to capture, replay and judge:

* ``vit``: a ViT: 8x8 patches of 64x64 images (a strided convolution), a class token,
  ``nn.TransformerEncoder`` (4 layers, d 192, 3 heads, GELU, pre-norm: attention through
  scaled_dot_product_attention), batch 8, AdamW;
* ``mobilenet``: a MobileNetV3-style net: inverted residuals with depthwise 3x3 convolutions,
  hardswish, squeeze-and-excitation (hardsigmoid gate), batch norm, 96x96 images, batch 16,
  SGD with momentum;
* ``moe``: a top-2 mixture of 8 experts (router linear, softmax, ``topk``, per expert
  ``nonzero`` + ``index_select`` + FFN + ``index_add_``), 1024 tokens of width 256, Adam. The
  router is collapsed (the last 4 experts get no tokens, as happens in long runs) and their
  Adam moments are decayed as by a long stretch of zero gradients (``exp_avg * 0.9^800``,
  ``exp_avg_sq * 0.999^70000``): subnormal in float32, as the issue's MoE state was;
* ``unet``: a small UNet: two down levels (conv 3x3, GroupNorm, SiLU, max-pool), a bottleneck,
  two up levels (ConvTranspose 2x2 or bilinear upsampling, ``cat`` with the skip), 64x64
  images, batch 4, Adam;
* ``tbe``: fbgemm's ``SplitTableBatchedEmbeddingBagsCodegen`` (8 tables of 100,000 x 64 on the
  host, sum pooling, 20 lookups per bag, exact row-wise Adagrad fused in the backward) with a
  dense MLP 13-512-256-64 and a top MLP over the concatenation, batch 512, SGD.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

#: Namespaces beyond aten that a family's capture must allow.
NAMESPACES = {"tbe": ("fbgemm",)}


def _training_step(model: nn.Module, optimizer, loss_of: Callable[[], torch.Tensor],
                   extra: Sequence[Callable[[], None]] = ()):
    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        optimizer.step()
        for hook in extra:
            hook()
    return step


# -- ViT ---------------------------------------------------------------------------------------
class ViT(nn.Module):
    def __init__(self, image: int = 64, patch: int = 8, d: int = 192, heads: int = 3,
                 layers: int = 4, classes: int = 100):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, tokens, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


# -- MobileNet-style ---------------------------------------------------------------------------
class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x):
        scale = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(scale))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, expand: int, cout: int, stride: int, se: bool):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, expand, 1, bias=False),
                                    nn.BatchNorm2d(expand), nn.Hardswish())
        self.depthwise = nn.Sequential(nn.Conv2d(expand, expand, 3, stride, 1, groups=expand,
                                                 bias=False),
                                       nn.BatchNorm2d(expand), nn.Hardswish())
        self.se = SqueezeExcite(expand, max(8, expand // 4)) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(expand, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        out = self.project(self.se(self.depthwise(self.expand(x))))
        return x + out if self.residual else out


class MobileNet(nn.Module):
    #: (expand, out, stride, squeeze-excite) per block.
    BLOCKS = ((64, 24, 2, False), (72, 24, 1, False), (96, 40, 2, True), (120, 40, 1, True),
              (240, 80, 2, False), (200, 80, 1, False), (480, 112, 1, True), (672, 160, 2, True))

    def __init__(self, classes: int = 100):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        blocks, cin = [], 16
        for expand, cout, stride, se in self.BLOCKS:
            blocks.append(InvertedResidual(cin, expand, cout, stride, se))
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.Conv2d(cin, 576, 1, bias=False), nn.BatchNorm2d(576),
                                  nn.Hardswish())
        self.fc = nn.Linear(576, classes)

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- mixture of experts ------------------------------------------------------------------------
class TopTwoMoE(nn.Module):
    def __init__(self, d: int = 256, hidden: int = 512, experts: int = 8, dead: int = 4):
        super().__init__()
        self.router = nn.Linear(d, experts)
        with torch.no_grad():  # a collapsed router: the last ``dead`` experts never win
            self.router.bias[experts - dead:] = -30.0
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, hidden), nn.GELU(),
                                                   nn.Linear(hidden, d))
                                     for _ in range(experts))
        self.out = nn.Linear(d, d)

    def forward(self, x):
        probs = self.router(x).softmax(dim=-1)
        weight, chosen = probs.topk(2, dim=-1)
        weight = weight / weight.sum(dim=-1, keepdim=True)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            hit = chosen == e
            rows = hit.any(dim=-1).nonzero().squeeze(1)
            gate = (weight * hit).sum(dim=-1).index_select(0, rows).unsqueeze(1)
            y = y.index_add(0, rows, expert(x.index_select(0, rows)) * gate)
        return self.out(x + y)


def decayed_adam_state(optimizer, params, first: int = 800, second: int = 70_000) -> None:
    """Give ``params`` (of experts that get no tokens, so zero gradients) the Adam moments of
    a gradient they had when they were alive (N(0, 1e-3) per element), decayed as by steps of
    zero gradients since: ``exp_avg`` by beta1^first, ``exp_avg_sq`` by beta2^second (each
    count chosen so that the moments land among float32's subnormals, not at zero)."""
    beta1, beta2 = optimizer.defaults["betas"]
    generator = torch.Generator().manual_seed(1)
    for p in params:
        state = optimizer.state[p]
        if state:
            grad = torch.randn(p.shape, generator=generator) * 1e-3
            state["exp_avg"].copy_(grad * (1 - beta1) * beta1 ** first)
            state["exp_avg_sq"].copy_(grad * grad * (1 - beta2) * beta2 ** second)


# -- UNet --------------------------------------------------------------------------------------
def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1), nn.GroupNorm(8, cout), nn.SiLU(),
                         nn.Conv2d(cout, cout, 3, 1, 1), nn.GroupNorm(8, cout), nn.SiLU())


class UNet(nn.Module):
    def __init__(self, cin: int = 3, width: int = 32, classes: int = 4):
        super().__init__()
        self.down1, self.down2 = _double_conv(cin, width), _double_conv(width, 2 * width)
        self.mid = _double_conv(2 * width, 4 * width)
        self.up2 = nn.ConvTranspose2d(4 * width, 2 * width, 2, 2)
        self.dec2 = _double_conv(4 * width, 2 * width)
        self.reduce1 = nn.Conv2d(2 * width, width, 1)
        self.dec1 = _double_conv(2 * width, width)
        self.out = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        s1 = self.down1(x)
        s2 = self.down2(F.max_pool2d(s1, 2))
        m = self.mid(F.max_pool2d(s2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), s2], dim=1))
        up1 = F.interpolate(self.reduce1(d2), scale_factor=2, mode="bilinear",
                            align_corners=False)
        return self.out(self.dec1(torch.cat([up1, s1], dim=1)))


# -- TBE + MLP ---------------------------------------------------------------------------------
class TbeMlp(nn.Module):
    def __init__(self, tables: int = 8, rows: int = 100_000, dim: int = 64, dense: int = 13):
        super().__init__()
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (ComputeDevice,
                                                                          EmbeddingLocation)
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            SplitTableBatchedEmbeddingBagsCodegen)
        self.tables, self.dim = tables, dim
        self.tbe = SplitTableBatchedEmbeddingBagsCodegen(
            [(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)] * tables,
            optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.01)
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256),
                                    nn.ReLU(), nn.Linear(256, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(dim * (tables + 1), 512), nn.ReLU(),
                                 nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, dense, indices, offsets):
        pooled = self.tbe(indices, offsets)  # [B, tables * dim]
        return self.top(torch.cat([self.bottom(dense), pooled], dim=1))


def build_family(name: str, quick: bool, device: str, scale: int = 1) -> Callable[[], None]:
    """One training step of family ``name`` (``scale`` multiplies its batch)."""
    torch.manual_seed(0)
    if name == "vit":
        model = ViT(32 if quick else 64, 8, 64 if quick else 192, 2 if quick else 3,
                    2 if quick else 4).to(device)
        x = torch.randn(8 * scale, 3, 32 if quick else 64, 32 if quick else 64, device=device)
        y = torch.randint(0, 100, (8 * scale,), device=device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        return _training_step(model, optimizer, lambda: F.cross_entropy(model(x), y))
    if name == "mobilenet":
        model = MobileNet().to(device)
        size = 48 if quick else 96
        x = torch.randn(16 * scale, 3, size, size, device=device)
        y = torch.randint(0, 100, (16 * scale,), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=False)
        return _training_step(model, optimizer, lambda: F.cross_entropy(model(x), y))
    if name == "moe":
        width = 64 if quick else 256
        model = TopTwoMoE(width, 2 * width).to(device)
        x = torch.randn(1024 * scale, width, device=device)
        target = torch.randn(1024 * scale, width, device=device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
        step = _training_step(model, optimizer, lambda: F.mse_loss(model(x), target))
        step()  # every parameter gets its Adam state, then the dead experts' decays
        dead = [p for expert in model.experts[4:] for p in expert.parameters()]
        decayed_adam_state(optimizer, dead)
        return step
    if name == "unet":
        model = UNet(width=16 if quick else 32).to(device)
        size = 32 if quick else 64
        x = torch.randn(4 * scale, 3, size, size, device=device)
        y = torch.randint(0, 4, (4 * scale, size, size), device=device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
        return _training_step(model, optimizer, lambda: F.cross_entropy(model(x), y))
    if name == "tbe":
        rows, batch, tables, pooling = (10_000, 64, 4, 10) if quick else (100_000, 512, 8, 20)
        batch *= scale
        model = TbeMlp(tables, rows).to(device)
        dense = torch.randn(batch, 13, device=device)
        indices = torch.randint(0, rows, (tables * batch * pooling,), device=device)
        offsets = torch.arange(0, tables * batch * pooling + 1, pooling, device=device)
        label = torch.rand(batch, 1, device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
        return _training_step(model, optimizer, lambda: F.binary_cross_entropy_with_logits(
            model(dense, indices, offsets), label))
    raise SystemExit(f"unknown model {name!r}")


FAMILIES = ("vit", "mobilenet", "moe", "unet", "tbe")
