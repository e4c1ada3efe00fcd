"""The whole Kimi K3 forward pass, assembled from one module per mechanism (ARCHITECTURE.md 1-8).

    embedding -> 93 x [ AttnRes read -> RMSNorm -> KDA | gated MLA,
                        AttnRes read -> RMSNorm -> dense SiTU-GLU (layer 0) | Stable LatentMoE ]
              -> AttnRes read -> RMSNorm -> untied LM head

There is no `h + f(h)`: the residual stream is the DepthState of model/attnres.py. Everything a page
plots comes out of the forward call's trace (the router's seam, the AttnRes reads, each module's
input and output), and every per-session choice (routing overrides, quantisation, activation) is one
RunOptions value passed with the call, so one model instance can serve many sessions without being
mutated.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from model import fast
from model.activations import ACTIVATIONS, GLUFFN
from model.attnres import MODULE_NAMES, AttnResQuery, DepthState
from model.config import K3Config
from model.kda import KDACache, KimiDeltaAttention
from model.mla import GatedMLA, MLACache
from model.moe import LatentMoE, RouteInfo, RoutingOverride
from model.norms import RMSNorm

__all__ = ["K3Model", "K3Output", "K3Cache", "Trace", "RoutingOverride", "RunOptions"]

# one override for every MoE layer, or {layer: override}
RoutingArg = RoutingOverride | Mapping[int, RoutingOverride] | None


@dataclass(frozen=True)
class RunOptions:
    """Every per-call choice of a forward, as one frozen, hashable value: it is passed whole to
    K3Model.forward / resume and is the key of the app's caches. Nothing here is module state.

    `routing` is stored as None, one RoutingOverride for every MoE layer, or a sorted tuple of
    (layer, override) pairs (a {layer: override} mapping is converted), so equal options are equal
    keys whatever form they were written in."""
    routing: RoutingOverride | tuple[tuple[int, RoutingOverride], ...] | None = None
    quant: bool = False                  # routed experts in MXFP4, their activations in MXFP8 (sec 7)
    activation: str | None = None        # None: the config's (SiTU-GLU); "swiglu" to compare

    def __post_init__(self):
        r = self.routing
        if r is not None and not isinstance(r, RoutingOverride):
            pairs = r.items() if isinstance(r, Mapping) else r
            r = tuple(sorted((int(layer), ov) for layer, ov in pairs if ov is not None)) or None
            if r is not None and not all(isinstance(ov, RoutingOverride) for _, ov in r):
                raise ValueError("routing maps MoE layers to RoutingOverride values")
            object.__setattr__(self, "routing", r)
        object.__setattr__(self, "quant", bool(self.quant))
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(f"activation is one of {sorted(ACTIVATIONS)} or None, not {self.activation!r}")

    def routing_at(self, layer: int) -> RoutingOverride | None:
        if self.routing is None or isinstance(self.routing, RoutingOverride):
            return self.routing
        return dict(self.routing).get(layer)


@dataclass
class Trace:
    """What one forward saw: the routing of every MoE layer, every AttnRes read, and each module's
    input and output (so no page has to replay part of the forward to see what a module read)."""
    num_layers: int
    routes: dict[int, RouteInfo] = field(default_factory=dict)   # MoE layer -> router output
    inputs: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)   # (layer, module) -> [B,T,d]
    outputs: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)  # (layer, module) -> [B,T,d]
    depth: DepthState | None = None
    snapshots: dict[int, DepthState] = field(default_factory=dict)  # layer -> residual state entering it
    # Each AttnRes read before a module: its sources (raw values, sealed first, partial last) with their
    # labels, and its output h before the module's RMSNorm; and the partial block sum after each module's
    # output was added (block mode), so a page can show the residual stream without replaying it.
    sources: dict[tuple[int, str], tuple[list[torch.Tensor], list[str]]] = field(default_factory=dict)
    mixes: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)       # [B, T, d]
    partials: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)    # [B, T, d]

    def _route(self, layer: int) -> RouteInfo:
        if layer not in self.routes:
            raise KeyError(f"layer {layer} has no router (layer 0 is a dense FFN; MoE layers are "
                           f"1..{self.num_layers - 1})")
        return self.routes[layer]

    def experts(self, layer: int) -> torch.Tensor:
        return self._route(layer).indices          # [B, T, k]

    def scores(self, layer: int) -> torch.Tensor:
        return self._route(layer).scores           # [B, T, E]

    def weights(self, layer: int) -> torch.Tensor:
        return self._route(layer).weights          # [B, T, k]

    def bias(self, layer: int) -> torch.Tensor:
        return self._route(layer).bias             # [E] the balancing bias this call selected with

    def module_input(self, layer: int, module: str) -> torch.Tensor:
        """x [B, T, d] that module `module` ("attn" or "ffn") of `layer` received: the AttnRes read
        before it, then its RMSNorm, exactly as the forward computed it."""
        if module not in MODULE_NAMES:
            raise ValueError(f"module is one of {MODULE_NAMES}, not {module!r}")
        if (layer, module) not in self.inputs:
            raise KeyError(f"no recorded input for layer {layer} {module} (the forward ran with "
                           f"record=False, or the model has no layer {layer})")
        return self.inputs[(layer, module)]

    def read(self, layer: int, module: str) -> tuple[list[torch.Tensor], list[str], torch.Tensor, torch.Tensor]:
        """The AttnRes read before `module` of `layer`: (sources, their labels, weights [B, T, S], the
        mixed h [B, T, d] before RMSNorm). module_input(layer, module) is RMSNorm(h) with the module's gain."""
        if (layer, module) not in self.sources:
            raise KeyError(f"no recorded read before layer {layer} {module}")
        srcs, names = self.sources[(layer, module)]
        label = f"L{layer}.{module}"
        weights = next(a for lab, a, _ in self.reads if lab == label)
        return srcs, names, weights, self.mixes[(layer, module)]

    def partial_after(self, layer: int, module: str) -> torch.Tensor:
        """The running sum of the open AttnRes block after `module`'s output of `layer` was added."""
        if self.partials.get((layer, module)) is None:
            raise KeyError(f"no recorded partial sum after layer {layer} {module} (block mode records it)")
        return self.partials[(layer, module)]

    def activation_stats(self) -> list[dict]:
        """Per layer and module: RMS and max |x| of the module's output over every token."""
        rows = []
        for (layer, module), out in self.outputs.items():
            x = out.detach().float()
            rows.append({"layer": layer, "module": module, "rms": x.pow(2).mean().sqrt().item(),
                         "max_abs": x.abs().max().item()})
        return rows

    @property
    def link_count(self) -> int:
        return self.depth.links if self.depth is not None else 0

    @property
    def reads(self) -> list:
        return self.depth.reads if self.depth is not None else []


@dataclass
class K3Cache:
    """Decode state per layer: KDACache (fixed size) or MLACache (one latent row per token)."""
    layers: list[KDACache | MLACache]
    length: int = 0                                 # tokens seen so far

    def numel(self, kind: str | None = None) -> int:
        return sum(c.numel() for c in self.layers
                   if kind is None or (kind == "kda") == isinstance(c, KDACache))


@dataclass
class K3Output:
    logits: torch.Tensor                            # [B, T, vocab]
    trace: Trace
    cache: K3Cache
    ids: torch.Tensor | None = None                 # [B, T] the input, so the call can be resumed
    options: RunOptions = RunOptions()              # what the call ran with (resume: the new ones)
    kernels: bool = False                           # computed with model/fast.py's kernels (a resume: as its base)


class K3Layer(nn.Module):
    def __init__(self, cfg: K3Config, index: int, init: bool = True):
        super().__init__()
        self.index, self.kind = index, cfg.layer_types[index]
        d = cfg.d_model
        self.attn_norm = RMSNorm(d, cfg.norm_eps)
        self.attn = KimiDeltaAttention(cfg) if self.kind == "kda" else GatedMLA(cfg)
        self.ffn_norm = RMSNorm(d, cfg.norm_eps)
        self.is_moe = cfg.is_moe(index)
        self.ffn = LatentMoE(cfg, init) if self.is_moe else GLUFFN(d, cfg.dense_hidden, cfg.activation)
        if cfg.attnres:
            self.q_attn, self.q_ffn = AttnResQuery(d, cfg.norm_eps), AttnResQuery(d, cfg.norm_eps)
        else:
            self.q_attn = self.q_ffn = None

    def attention(self, x: torch.Tensor, cache):
        """x = attn_norm(h), the attention module's input."""
        if self.kind == "mla":
            # decode steps use the absorbed path: attend over the 576-value latent directly
            return self.attn(x, cache=cache, absorbed=cache is not None and x.shape[1] == 1)
        return self.attn(x, cache=cache)

    def feed_forward(self, x: torch.Tensor, opts: RunOptions, fixed: RouteInfo | None = None):
        """x = ffn_norm(h), the FFN module's input. Returns (output, RouteInfo or None). `fixed`: a
        routing already decided (K3Model.router_gradients), used instead of the router's."""
        if self.is_moe and fixed is not None:
            return self.ffn.apply_route(x, fixed.indices, fixed.weights, quant=opts.quant,
                                        activation=opts.activation), fixed
        if self.is_moe:
            return self.ffn(x, routing=opts.routing_at(self.index), quant=opts.quant,
                            activation=opts.activation)
        return self.ffn(x, opts.activation), None


class K3Model(nn.Module):
    def __init__(self, cfg: K3Config, init: bool = True):
        """`init=False`: the routed experts' weights (~90 % of the parameters) are left as allocated, not drawn
        at random, for a model whose weights are loaded next (load_state_dict with assign=True replaces them)."""
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.layers = nn.ModuleList(K3Layer(cfg, i, init) for i in range(cfg.num_layers))
        self.q_out = AttnResQuery(d, cfg.norm_eps) if cfg.attnres else None
        self.final_norm = RMSNorm(d, cfg.norm_eps)
        self.head = nn.Linear(d, cfg.vocab_size, bias=False)     # untied from the embedding
        nn.init.normal_(self.head.weight, std=d ** -0.5)

    def forward(self, ids: torch.Tensor, routing: RoutingArg = None, cache: K3Cache | None = None,
                quant: bool = False, activation: str | None = None, record: bool = True,
                max_tokens: int | None = None, *, options: RunOptions | None = None) -> K3Output:
        """ids [B, T]. The per-call options come either whole as `options` or as the shorthands
        `routing` (one RoutingOverride for every MoE layer, or {layer: override}), `quant` (routed
        experts with MXFP4 weights and MXFP8 activations) and `activation` ("swiglu" swaps out
        SiTU-GLU). `cache` continues a previous call (prefill, then one token at a time);
        `record` keeps the per-module trace (inputs, outputs, reads, snapshots for resume);
        `max_tokens` is the caller's cap on T (the math has none)."""
        cfg = self.cfg
        opts = _options(options, routing, quant, activation)
        self._check_ids(ids, max_tokens)
        state = DepthState(self.embed(ids), cfg.attnres, cfg.attnres_block_size, record=record)
        trace = Trace(cfg.num_layers, depth=state)
        return self._run(ids, state, trace, 0, opts, cache, record)

    def resume(self, base: K3Output, from_layer: int, routing: RoutingArg = None, quant: bool = False,
               activation: str | None = None, *, options: RunOptions | None = None) -> K3Output:
        """Re-run layers from_layer..L-1 of a recorded forward with new options, reusing everything
        before: what the routing explorer does when a change only affects later layers. Equals a
        full forward whose options differ from the base's only at layers >= from_layer."""
        opts = _options(options, routing, quant, activation)
        if not base.trace.snapshots:
            raise ValueError("the base forward was not recorded (record=False); it cannot be resumed")
        if not 0 <= from_layer < self.cfg.num_layers:
            raise ValueError(f"from_layer must lie in 0..{self.cfg.num_layers - 1}")
        state = base.trace.snapshots[from_layer].copy()
        trace = Trace(self.cfg.num_layers, depth=state)
        for i in range(from_layer):
            if i in base.trace.routes:
                trace.routes[i] = base.trace.routes[i]
            for m in MODULE_NAMES:
                if (i, m) in base.trace.outputs:
                    trace.inputs[(i, m)] = base.trace.inputs[(i, m)]
                    trace.outputs[(i, m)] = base.trace.outputs[(i, m)]
                for rec, got in ((trace.sources, base.trace.sources), (trace.mixes, base.trace.mixes),
                                 (trace.partials, base.trace.partials)):
                    if (i, m) in got:
                        rec[(i, m)] = got[(i, m)]
            trace.snapshots[i] = base.trace.snapshots[i]
        return self._run(base.ids, state, trace, from_layer, opts, None, True,
                         prefix_cache=base.cache.layers[:from_layer], kernels=base.kernels)

    def _run(self, ids, state: DepthState, trace: Trace, start: int, opts: RunOptions, cache,
             record: bool, prefix_cache=(), fixed_routes: Mapping[int, RouteInfo] | None = None,
             kernels: bool | None = None) -> K3Output:
        # every layer computes alike: with the compiled kernels or without, decided here once (or by the base run)
        kernels = fast.active() if kernels is None else kernels
        with fast.pinned(kernels):
            new_cache = list(prefix_cache)
            for i in range(start, len(self.layers)):
                layer = self.layers[i]
                if record:
                    trace.snapshots[i] = state.copy()
                    trace.sources[(i, "attn")] = state.sources()
                state.begin_layer(i)
                h, _ = state.read(layer.q_attn)
                x_attn = layer.attn_norm(h)                                   # [B, T, d]
                a, layer_cache = layer.attention(x_attn, cache.layers[i] if cache is not None else None)
                new_cache.append(layer_cache)
                state.add(a)
                if record:
                    trace.mixes[(i, "attn")], trace.partials[(i, "attn")] = h, state.partial
                    trace.sources[(i, "ffn")] = state.sources()
                h_ffn, _ = state.read(layer.q_ffn)
                x_ffn = layer.ffn_norm(h_ffn)                                 # [B, T, d]
                m, info = layer.feed_forward(x_ffn, opts, fixed_routes.get(i) if fixed_routes else None)
                if info is not None:
                    trace.routes[i] = info
                state.add(m)
                if record:
                    trace.inputs[(i, "attn")], trace.inputs[(i, "ffn")] = x_attn, x_ffn
                    trace.outputs[(i, "attn")], trace.outputs[(i, "ffn")] = a, m
                    trace.mixes[(i, "ffn")], trace.partials[(i, "ffn")] = h_ffn, state.partial
            y, _ = state.read(self.q_out, "out")
            logits = self.head(self.final_norm(y))                    # [B, T, vocab]
            if not bool(torch.isfinite(logits).all()):
                raise ValueError("the forward pass produced non-finite logits (NaN or inf): check the "
                                 "weights and any extreme routing or quantisation settings")
            seen = (cache.length if cache is not None else 0) + ids.shape[1]
            return K3Output(logits, trace, K3Cache(new_cache, seen), ids, opts, kernels)

    def _check_ids(self, ids: torch.Tensor, max_tokens: int | None) -> None:
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            raise ValueError(f"ids must be a [batch, tokens] tensor, got {getattr(ids, 'shape', type(ids))}")
        if ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"ids must be integer token ids, got dtype {ids.dtype}")
        if ids.shape[1] == 0 or ids.shape[0] == 0:
            raise ValueError("ids is empty: there must be at least one token")
        if max_tokens is not None and ids.shape[1] > max_tokens:
            raise ValueError(f"{ids.shape[1]} tokens is more than the cap of {max_tokens}")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.cfg.vocab_size:
            raise ValueError(f"token id {lo if lo < 0 else hi} is outside the vocabulary "
                             f"0..{self.cfg.vocab_size - 1}")

    def moe_layers(self) -> list[LatentMoE]:
        return [layer.ffn for layer in self.layers if layer.is_moe]

    def inspect(self, out: K3Output, layer: int) -> dict[str, dict[str, torch.Tensor]]:
        """Both modules of `layer` in a recorded forward, step by step: each module's `parts`, computed
        by the module's own code from the input the trace recorded (and, in an MoE layer, from the
        routing it recorded), so nothing before the layer runs again. {"attn": {...}, "ffn": {...}};
        each "out" equals the module output in the trace (tests/test_layer.py)."""
        if not 0 <= layer < self.cfg.num_layers:
            raise ValueError(f"layer must lie in 0..{self.cfg.num_layers - 1}")
        tr, block, opts = out.trace, self.layers[layer], out.options
        attn = block.attn.parts(tr.module_input(layer, "attn"))
        x = tr.module_input(layer, "ffn")
        if block.is_moe:
            r = tr.routes[layer]
            ffn = block.ffn.parts(x, r.indices, r.weights, quant=opts.quant, activation=opts.activation)
        else:
            ffn = block.ffn.parts(x, opts.activation)
        return {"attn": attn, "ffn": ffn}

    def router_gradients(self, out: K3Output) -> tuple[float, dict[int, torch.Tensor]]:
        """How the language-model loss trains the routers (ARCHITECTURE.md section 5): the gradient of the
        recorded prompt's mean next-token cross-entropy with respect to the chosen experts' raw router
        scores s_i, [B, T, k] per MoE layer in the slot order of trace.experts. The choice of experts is
        held at what the forward chose (a top-k has no gradient) and the scores reach the loss only
        through p_i = s_i / sum_j s_j; the balancing bias, which only chose the set, gets none. Runs the
        layers from the first MoE layer on again, with autograd, from the recorded residual state.
        Returns (loss, {layer: gradient})."""
        ids = out.ids
        if ids is None or ids.shape[1] < 2:
            raise ValueError("the next-token loss needs at least two tokens")
        if not out.trace.snapshots or not out.trace.routes:
            raise ValueError("the forward was not recorded (record=False) or has no MoE layer")
        moe = sorted(out.trace.routes)
        with torch.inference_mode(False), torch.enable_grad():
            # clones: tensors made in inference mode (the app's forwards) cannot enter autograd
            state = out.trace.snapshots[moe[0]].copy()
            state.blocks = [b.clone() for b in state.blocks]
            state.partial = state.partial.clone() if state.partial is not None else None
            state.record = False
            leaves, fixed = [], {}
            for i in moe:
                r = out.trace.routes[i]
                scores = r.scores.clone().requires_grad_(True)              # [B, T, E]
                idx = r.indices.clone()                                     # [B, T, k]
                raw = scores.gather(-1, idx)
                p = raw / raw.sum(-1, keepdim=True).clamp_min(1e-30)        # as model.moe.route
                leaves.append(scores)
                fixed[i] = RouteInfo(scores, idx, p, r.cutoff, r.bias)
            run = self._run(ids, state, Trace(self.cfg.num_layers, depth=state), moe[0], out.options, None,
                            False, fixed_routes=fixed)
            logits = run.logits[:, :-1].reshape(-1, run.logits.shape[-1])     # every row's next-token loss
            loss = F.cross_entropy(logits if logits.dtype == torch.float64 else logits.float(),
                                   ids[:, 1:].reshape(-1).clone())
            grads = torch.autograd.grad(loss, leaves)
        return float(loss.detach()), {i: g.gather(-1, fixed[i].indices).detach() for i, g in zip(moe, grads)}


def model_with_weights(cfg: K3Config, state: Mapping[str, torch.Tensor]) -> K3Model:
    """A K3Model of `cfg` holding the tensors of `state` themselves (assigned, not copied: shared with
    whoever else holds them), in eval mode with no gradients.

    It is built on the CPU, the routed experts without their random init (init=False), the rest with it, and
    the state then replaces all of it. Building it on the "meta" device would skip every init, but the init
    ops on meta tensors make torch import its compiler stack (torch._dynamo) on the way: ~2.9 s once per
    process, measured as part of a page's first visit."""
    model = K3Model(cfg, init=False)
    model.load_state_dict(state, assign=True, strict=True)
    return model.eval().requires_grad_(False)


def _options(options: RunOptions | None, routing: RoutingArg, quant: bool,
             activation: str | None) -> RunOptions:
    if options is None:
        return RunOptions(routing, quant, activation)
    if routing is not None or quant or activation is not None:
        raise ValueError("pass the options either whole (options=RunOptions(...)) or as routing/quant/"
                         "activation, not both")
    if not isinstance(options, RunOptions):
        raise TypeError(f"options must be a RunOptions, not {type(options).__name__}")
    return options
