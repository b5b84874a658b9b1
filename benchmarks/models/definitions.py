"""The benchmark's models in a few dozen lines of ``torch.nn`` each, exported once to ONNX.

BERT-base (embeddings, 12 post-LN encoder layers, hidden 768, 12 heads, intermediate
3072, GELU; no attention mask: every token attends to all 128), ResNet-18 and
MobileNetV2, batch 1. Written here because torchvision does not load against the CPU
build of torch on this machine kind ("operator torchvision::nms does not exist"). The
weights are random (seeded); BatchNorm statistics and affine parameters are random too,
so folding them into the convolutions is not an identity. Quick sizes (`quick=True`)
are tiny versions of the same definitions, for the smoke test.

Each model is exported with the legacy exporter (``dynamo=False``, opset 17: no
``onnxscript`` needed) into the cache folder, ``$LOOMTUNE_BENCH_CACHE/models`` (default
``$TMPDIR/loomtune-benchmarks/models``): outside git, keyed by the model, its size,
the torch version and the seed, so a later run reuses the file.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MODELS = ("bert", "resnet18", "mobilenetv2", "resnet34")
STAGE_BLOCKS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}
OPSET = 17


def cache_dir() -> Path:
    """Where exported models are kept (``LOOMTUNE_BENCH_CACHE=off``: a fresh temporary one)."""
    root = os.environ.get("LOOMTUNE_BENCH_CACHE")
    if root == "off":
        return Path(tempfile.mkdtemp(prefix="loomtune-models-"))
    base = Path(root) if root else Path(tempfile.gettempdir()) / "loomtune-benchmarks"
    return base / "models"


@dataclass(frozen=True)
class ModelSpec:
    """One benchmark model: how to build it in torch and the inputs it takes."""

    name: str
    description: str
    config: dict[str, int]
    build: Callable[..., Any]  # config -> torch.nn.Module (weights seeded by the caller)
    inputs: Callable[[dict[str, int], np.random.Generator], list[np.ndarray]]
    input_names: tuple[str, ...]


# -- torch definitions (torch is imported only when a model is built) -------------------------


def _bert(vocab: int, seq: int, hidden: int, heads: int, layers: int, ffn: int) -> Any:
    import torch
    from torch import nn

    class Layer(nn.Module):
        """A BERT encoder layer as HuggingFace writes it (post-LN, erf GELU)."""

        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.o = nn.Linear(hidden, hidden)
            self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
            self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

        def heads(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            return x.view(b, s, heads, hidden // heads).transpose(1, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hidden // heads)
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            ctx = ctx.transpose(1, 2).reshape(x.shape)
            h = self.ln1(x + self.o(ctx))
            return self.ln2(h + self.down(nn.functional.gelu(self.up(h))))

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.words = nn.Embedding(vocab, hidden)
            self.positions = nn.Embedding(seq, hidden)
            self.types = nn.Embedding(2, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.register_buffer("position_ids", torch.arange(seq).unsqueeze(0))

        def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
            x = self.words(input_ids) + self.positions(self.position_ids)
            x = self.ln(x + self.types(token_type_ids))
            for layer in self.layers:
                x = layer(x)
            return x

    return Bert()


def _bn(c: int) -> Any:
    from torch import nn

    return nn.BatchNorm2d(c)


def _resnet(width: int, blocks: int | tuple[int, ...], classes: int) -> Any:
    """ResNet-18's shape: a 7×7/2 stem and max pool, four stages of `blocks` basic blocks
    (widths w, 2w, 4w, 8w; stride 2 from the second), global average pool, a classifier.
    `blocks` per stage (ResNet-34: 3, 4, 6, 3) or one count for all four."""
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = _bn(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = _bn(cout)
            self.down = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _bn(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            h = nn.functional.relu(self.b1(self.c1(x)))
            return nn.functional.relu(self.b2(self.c2(h)) + self.down(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, width, 7, 2, 3, bias=False),
        _bn(width),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = width
    counts = (blocks,) * 4 if isinstance(blocks, int) else blocks
    for stage, count in enumerate(counts):
        cout = width << stage
        for b in range(count):
            layers.append(Basic(cin, cout, 2 if stage and not b else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def _mobilenetv2(width_mult: float, stages: int, classes: int) -> Any:
    """MobileNetV2 (Sandler et al.): inverted residual blocks (1×1 expand, 3×3 depthwise,
    1×1 project; ReLU6), the paper's table; `stages` < 7 keeps only the first ones."""
    from torch import nn

    def c(ch: int) -> int:
        return max(8, int(ch * width_mult + 4) // 8 * 8)

    def cbr(cin: int, cout: int, k: int, stride: int, groups: int = 1) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), _bn(cout)]

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
            super().__init__()
            mid = cin * t
            body = [*cbr(cin, mid, 1, 1), nn.ReLU6()] if t != 1 else []
            body += [*cbr(mid, mid, 3, stride, groups=mid), nn.ReLU6(), *cbr(mid, cout, 1, 1)]
            self.body = nn.Sequential(*body)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    table = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1)]
    table += [(6, 160, 3, 2), (6, 320, 1, 1)]
    layers: list[nn.Module] = [*cbr(3, c(32), 3, 2), nn.ReLU6()]
    cin = c(32)
    for t, ch, n, s in table[:stages]:
        for i in range(n):
            layers.append(Inverted(cin, c(ch), s if i == 0 else 1, t))
            cin = c(ch)
    last = max(1280, c(1280)) if width_mult > 1 else c(1280)
    layers += [*cbr(cin, last, 1, 1), nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    layers += [nn.Dropout(0.2), nn.Linear(last, classes)]
    return nn.Sequential(*layers)


def _image(config: dict[str, int], rng: np.random.Generator) -> list[np.ndarray]:
    shape = (1, 3, config["size"], config["size"])
    return [rng.uniform(-1, 1, shape).astype(np.float32)]


def _tokens(config: dict[str, int], rng: np.random.Generator) -> list[np.ndarray]:
    shape = (1, config["seq"])
    return [rng.integers(0, config["vocab"], shape), rng.integers(0, 2, shape)]


def spec(name: str, quick: bool = False) -> ModelSpec:
    """The benchmark model `name` (one of MODELS), full size or quick."""
    if name == "bert":
        config = (
            dict(vocab=100, seq=16, hidden=64, heads=4, layers=2, ffn=256)
            if quick
            else dict(vocab=30522, seq=128, hidden=768, heads=12, layers=12, ffn=3072)
        )
        what = "BERT-base encoder with embeddings" if not quick else "BERT-like, 2 × hidden 64"
        return ModelSpec(
            name, what, config, lambda c: _bert(**c), _tokens, ("input_ids", "token_type_ids")
        )
    if name == "resnet18":
        config = (
            dict(width=8, blocks=1, classes=10, size=32)
            if quick
            else dict(width=64, blocks=2, classes=1000, size=224)
        )
        what = "ResNet-18, 224×224" if not quick else "ResNet-ish, width 8, 32×32"

        def resnet(c: dict[str, int]) -> Any:
            return _resnet(c["width"], c["blocks"], c["classes"])

        return ModelSpec(name, what, config, resnet, _image, ("input",))
    if name == "resnet34":  # ResNet-18's layer shapes, more of them: its tasks are ResNet-18's
        config = (
            dict(width=8, depth=34, classes=10, size=32)
            if quick
            else dict(width=64, depth=34, classes=1000, size=224)
        )
        what = "ResNet-34, 224×224" if not quick else "ResNet-34-ish, width 8, 32×32"

        def resnet34(c: dict[str, int]) -> Any:
            return _resnet(c["width"], STAGE_BLOCKS[c["depth"]], c["classes"])

        return ModelSpec(name, what, config, resnet34, _image, ("input",))
    if name == "mobilenetv2":
        config = (
            dict(width_pct=25, stages=3, classes=10, size=32)
            if quick
            else dict(width_pct=100, stages=7, classes=1000, size=224)
        )
        what = "MobileNetV2 1.0, 224×224" if not quick else "MobileNetV2-ish 0.25, 32×32"

        def mobilenet(c: dict[str, int]) -> Any:
            return _mobilenetv2(c["width_pct"] / 100, c["stages"], c["classes"])

        return ModelSpec(name, what, config, mobilenet, _image, ("input",))
    raise KeyError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")


def build(model: ModelSpec, seed: int) -> Any:
    """The torch module with seeded random weights and BatchNorm statistics, in eval mode."""
    import torch

    torch.manual_seed(seed)
    module = model.build(model.config)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(0.5 + torch.rand(c, generator=generator))
                m.bias.copy_(0.1 * torch.randn(c, generator=generator))
                m.running_mean.copy_(0.1 * torch.randn(c, generator=generator))
                m.running_var.copy_(0.5 + torch.rand(c, generator=generator))
    return module.eval()


def torch_inputs(model: ModelSpec, arrays: list[np.ndarray]) -> list[Any]:
    import torch

    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


def exported(model: ModelSpec, seed: int, folder: Path | None = None) -> Path:
    """The model's ONNX file, exported now unless the cache has it (written atomically)."""
    import torch

    size = "-".join(f"{k}{v}" for k, v in model.config.items())
    version = str(torch.__version__).replace("+", "_")
    folder = folder or cache_dir()
    path = folder / f"{model.name}-{size}-torch{version}-seed{seed}.onnx"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    module = build(model, seed)
    example = torch_inputs(model, model.inputs(model.config, np.random.default_rng(seed)))
    partial = path.with_suffix(f".{os.getpid()}.partial")
    torch.onnx.export(
        module,
        tuple(example),
        str(partial),
        opset_version=OPSET,
        dynamo=False,
        input_names=list(model.input_names),
        output_names=["output"],
    )
    partial.replace(path)
    return path
