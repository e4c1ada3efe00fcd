"""The numba loops behind model/fast.py, imported only where numba is installed (fast.py decides when they run).

Each loop computes what one plain torch reference computes (named in model/fast.py) and is tested against it
(tests/test_fast.py). `cache=True` keeps their machine code in model/__pycache__; `nogil=True` lets a session's
forward run beside another's.

Sums over the latent width are reductions, which LLVM vectorises only when it may reorder them: the loops that
have them are compiled with `_REORDER` (reassociation and fused multiply-adds, ~1.3x here; each sum then in another
order than the reference's, within float32 rounding) and without the flags that assume no NaN or infinity, so a
NaN is still seen where a loop checks for one.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_REORDER = {"reassoc", "contract", "arcp", "nsz"}
_LOOP = dict(nogil=True, cache=True, error_model="numpy")   # numpy: a division by 0 gives inf, no exception check in the loop


# ---- elementwise functions in float32 that LLVM can vectorise ---------------------------------------------------
# libm's expf is a scalar call (numba has no vector maths library here; ~2.7 ns a value) where torch's is vectorised:
# these are built from one polynomial exp that LLVM vectorises with the rest of the loop (~0.5 ns a value), within
# 2 ulp of the float64 value (tests/test_fast.py).

@intrinsic
def _float_from_bits(typingctx, bits):
    # the float32 whose IEEE 754 bit pattern is the low 32 bits of an integer
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        word = args[0] if bits.bitwidth == 32 else builder.trunc(args[0], ir.IntType(32))
        return builder.bitcast(word, ir.FloatType())
    return types.float32(bits), codegen


@njit(inline="always")
def exp32(x):
    """e^x for float32 x in [-80, 80], and e^-80 or e^80 beyond: e^x = 2^n e^r with n = round(x / ln 2) and
    |r| <= ln 2 / 2, r taken in float64 so that no reordering of the reduction loses bits; e^r by its Taylor
    polynomial to r^7 (the remainder is below 2^-27 of it); 2^n written straight into the exponent bits.
    The clamp keeps every result a normal float: sigmoid and tanh, its users, are within float32 rounding of 0 or
    1 there, and a subnormal operand costs the CPU ~100 cycles (a trained layer's activations met them often)."""
    x = min(max(x, np.float32(-80.0)), np.float32(80.0))
    n = np.floor(x * np.float32(1.4426950408889634) + np.float32(0.5))
    r = np.float32(np.float64(x) - np.float64(n) * 0.6931471805599453)
    p = np.float32(1.0 / 5040.0)
    p = p * r + np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    return p * _float_from_bits((np.int64(n) + 127) << 23)


@njit(inline="always")
def sigmoid32(x):
    return np.float32(1.0) / (np.float32(1.0) + exp32(-x))


@njit(inline="always")
def tanh32(x):
    """tanh x: (1 - e^-2|x|) / (1 + e^-2|x|) with the sign of x, and near 0 (|x| < 1/4, where 1 - e^-2|x| would
    lose bits) its odd Taylor polynomial to x^11."""
    a = abs(x)
    t = exp32(np.float32(-2.0) * a)
    big = (np.float32(1.0) - t) / (np.float32(1.0) + t)
    z = x * x
    small = np.float32(-1382.0 / 155925.0)
    small = small * z + np.float32(62.0 / 2835.0)
    small = small * z + np.float32(-17.0 / 315.0)
    small = small * z + np.float32(2.0 / 15.0)
    small = small * z + np.float32(-1.0 / 3.0)
    small = (small * z) * a + a
    y = small if a < np.float32(0.25) else big
    return -y if x < 0 else y


@njit(inline="always")
def glu32(g, u, act, beta_gate, beta_up):
    """The FFN activation of gate g and up u: SiTU-GLU (act 0: [beta_g tanh(g / beta_g) sigmoid(g)] [beta_u
    tanh(u / beta_u)], model.activations.situ_glu) or SwiGLU (act 1: g sigmoid(g) u)."""
    if act == 0:
        return (beta_gate * tanh32(g / beta_gate) * sigmoid32(g)) * (beta_up * tanh32(u / beta_up))
    return g * sigmoid32(g) * u


@njit(**_LOOP)
def elementwise(x, which, out):
    # the functions above over an array (their tests): 0 exp, 1 sigmoid, 2 tanh
    for i in range(x.shape[0]):
        if which == 0:
            out[i] = exp32(x[i])
        elif which == 1:
            out[i] = sigmoid32(x[i])
        else:
            out[i] = tanh32(x[i])


@njit(**_LOOP)
def glu(g, u, act, beta_gate, beta_up, out):
    for i in range(g.shape[0]):
        out[i] = glu32(g[i], u[i], act, beta_gate, beta_up)


# ---- small pieces the layers share ------------------------------------------------------------------------------

@njit(inline="always")
def _matvec(w, x, out):
    # out [R] = w [R, C] x [C]
    for r in range(w.shape[0]):
        acc = np.float32(0.0)
        for c in range(w.shape[1]):
            acc += w[r, c] * x[c]
        out[r] = acc


@njit(inline="always")
def _rms_gain(x, gain, eps):
    # x [C] in place: model.norms.RMSNorm
    ss = np.float32(0.0)
    for c in range(x.shape[0]):
        ss += x[c] * x[c]
    inv = np.float32(1.0) / np.sqrt(ss / np.float32(x.shape[0]) + eps)
    for c in range(x.shape[0]):
        x[c] = x[c] * inv * gain[c]


# ---- KDA ---------------------------------------------------------------------------------------------------------

@njit(**_LOOP)
def kda(q, k, v, alpha, beta, scale, S, o):
    # q, k, alpha [B, T, H, K]; v, o [B, T, H, V]; beta [B, T, H]; S [B, H, K, V], updated in place.
    # Per token, as kda_recurrent: S <- diag(alpha) S; S <- S + k (beta (v - S^T k))^T; o = S^T (scale q)
    B, T, H, K = q.shape
    V = v.shape[3]
    delta = np.empty(V, dtype=S.dtype)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                for i in range(K):
                    a = alpha[b, t, h, i]
                    for j in range(V):
                        S[b, h, i, j] *= a
                for j in range(V):
                    delta[j] = 0.0
                for i in range(K):
                    ki = k[b, t, h, i]
                    for j in range(V):
                        delta[j] += S[b, h, i, j] * ki                  # S^T k
                bt = beta[b, t, h]
                for j in range(V):
                    delta[j] = bt * (v[b, t, h, j] - delta[j])
                for j in range(V):
                    o[b, t, h, j] = 0.0
                for i in range(K):
                    ki = k[b, t, h, i]
                    qi = q[b, t, h, i] * scale
                    for j in range(V):
                        s = S[b, h, i, j] + ki * delta[j]
                        S[b, h, i, j] = s
                        o[b, t, h, j] += s * qi


@njit(fastmath=_REORDER, **_LOOP)
def kda_layer(proj, tail, conv_w, w_fb, a_log, dt_bias, bound, scale, gain, eps, S, out, new_tail):
    """model.kda.KimiDeltaAttention.forward between its two projections, per token: the causal depthwise
    convolution of q|k|v and its SiLU, the L2 norm of each q and k head, the decay log g = bound sigmoid(e^A_log
    (W_fb fa + dt_bias)) and beta = sigmoid(b), the recurrence of `kda` (with alpha = e^g), then each head's read
    through RMSNorm (gain, eps) times sigmoid of the output gate.
    proj [B, T, 3P + K + H + P]: in_proj(x) = q|k|v before the convolution, fa, b, the output gate; tail [B, kc-1,
    3P] the inputs before the first token (the cache's, or zeros); conv_w [3P, kc]; w_fb [P, K]; a_log [H];
    dt_bias [H, K]; S [B, H, K, V] the state, updated in place; out [B, T, P] (P = H V = H K); new_tail [B, kc-1,
    3P] the last kc - 1 inputs of the convolution."""
    B, T = proj.shape[0], proj.shape[1]
    H, K, V = S.shape[1], S.shape[2], S.shape[3]
    P3, kc = conv_w.shape[0], conv_w.shape[1]
    P = P3 // 3
    xs = np.empty((kc - 1 + T, P3), dtype=np.float32)
    y = np.empty(P3, dtype=np.float32)
    alpha = np.empty((H, K), dtype=np.float32)
    delta = np.empty(V, dtype=np.float32)
    o = np.empty(V, dtype=np.float32)
    fa0, b0, g0 = P3, P3 + K, P3 + K + H
    for b in range(B):
        for t in range(kc - 1):
            for c in range(P3):
                xs[t, c] = tail[b, t, c]
        for t in range(T):
            for c in range(P3):
                xs[kc - 1 + t, c] = proj[b, t, c]
        for t in range(kc - 1):
            for c in range(P3):
                new_tail[b, t, c] = xs[T + t, c]
        for t in range(T):
            for c in range(P3):                                 # the convolution, current token on the last tap
                acc = np.float32(0.0)
                for i in range(kc):
                    acc += xs[t + i, c] * conv_w[c, i]
                y[c] = acc * sigmoid32(acc)
            for hh in range(2 * H):                             # q heads then k heads, each to unit length
                ss = np.float32(0.0)
                for i in range(K):
                    ss += y[hh * K + i] * y[hh * K + i]
                inv = np.float32(1.0) / np.sqrt(ss + np.float32(1e-6))
                for i in range(K):
                    y[hh * K + i] *= inv
            for h in range(H):
                rate = exp32(a_log[h])
                for i in range(K):
                    z = np.float32(0.0)
                    for j in range(K):
                        z += w_fb[h * K + i, j] * proj[b, t, fa0 + j]
                    alpha[h, i] = exp32(bound * sigmoid32(rate * (z + dt_bias[h, i])))
            for h in range(H):
                bt = sigmoid32(proj[b, t, b0 + h])
                q0, k0, v0 = h * K, P + h * K, 2 * P + h * V
                for i in range(K):
                    a = alpha[h, i]
                    for j in range(V):
                        S[b, h, i, j] *= a
                for j in range(V):
                    delta[j] = 0.0
                for i in range(K):
                    ki = y[k0 + i]
                    for j in range(V):
                        delta[j] += S[b, h, i, j] * ki              # S^T k
                for j in range(V):
                    delta[j] = bt * (y[v0 + j] - delta[j])
                    o[j] = 0.0
                for i in range(K):
                    ki = y[k0 + i]
                    qi = y[q0 + i] * scale
                    for j in range(V):
                        s = S[b, h, i, j] + ki * delta[j]
                        S[b, h, i, j] = s
                        o[j] += s * qi
                _rms_gain(o, gain, eps)
                for j in range(V):
                    out[b, t, h * V + j] = o[j] * sigmoid32(proj[b, t, g0 + h * V + j])


# ---- gated MLA ---------------------------------------------------------------------------------------------------

@njit(fastmath=_REORDER, **_LOOP)
def mla(x, w_dq, q_gain, w_uq, w_dkv, kv_gain, w_ukv, w_g, eps, nope, scale, out, latent, k_rope):
    """model.mla.GatedMLA.forward without a cache (the naive path, causal) up to W_o, per token: the query W_uq
    RMSNorm(W_dq x); the latent c = RMSNorm(first kv_lora of W_dkv x) and the unrotated k_rope (its rest); each head's
    key [W_uk,i c ; k_rope] and value W_uv,i c (w_ukv rows: per head nope key rows, then v value rows); the softmax
    over tokens up to this one of scale q . key; out [B, T, H v] = sigmoid(W_g x) * the mix of values.
    x [B, T, d]; w_dq [qr, d], q_gain [qr], w_uq [H (nope + rope), qr], w_dkv [kv_lora + rope, d], kv_gain [kv_lora],
    w_ukv [H (nope + v), kv_lora], w_g [H v, d]; latent [B, T, kv_lora] and k_rope [B, T, rope]: the layer's cache.
    Keys are kept transposed (per channel, the tokens in a row) so that the scores of a query run over the tokens
    in the inner loop, vectorised."""
    B, T, d = x.shape
    kv_lora = kv_gain.shape[0]
    rope = k_rope.shape[2]
    Hv = w_g.shape[0]
    H = w_uq.shape[0] // (nope + rope)
    V = Hv // H
    cq = np.empty(w_dq.shape[0], dtype=np.float32)
    ckv = np.empty(w_dkv.shape[0], dtype=np.float32)
    q = np.empty((T, H * (nope + rope)), dtype=np.float32)
    kvt = np.empty(H * (nope + V), dtype=np.float32)
    keys = np.empty((H, nope + rope, T), dtype=np.float32)   # keys[h, c, s]
    vals = np.empty((H, T, V), dtype=np.float32)
    logit = np.empty(T, dtype=np.float32)
    mix = np.empty(V, dtype=np.float32)
    gate = np.empty(Hv, dtype=np.float32)
    for b in range(B):
        for t in range(T):
            _matvec(w_dq, x[b, t], cq)
            _rms_gain(cq, q_gain, eps)
            _matvec(w_uq, cq, q[t])
            _matvec(w_dkv, x[b, t], ckv)
            _rms_gain(ckv[:kv_lora], kv_gain, eps)
            for c in range(kv_lora):
                latent[b, t, c] = ckv[c]
            for c in range(rope):
                k_rope[b, t, c] = ckv[kv_lora + c]
            _matvec(w_ukv, ckv[:kv_lora], kvt)
            for h in range(H):
                for c in range(nope):
                    keys[h, c, t] = kvt[h * (nope + V) + c]
                for c in range(rope):
                    keys[h, nope + c, t] = ckv[kv_lora + c]
                for j in range(V):
                    vals[h, t, j] = kvt[h * (nope + V) + nope + j]
        for t in range(T):
            _matvec(w_g, x[b, t], gate)
            for h in range(H):
                n = t + 1                                   # causal: this token and the ones before
                for s in range(n):
                    logit[s] = 0.0
                for c in range(nope + rope):
                    qc = q[t, h * (nope + rope) + c] * scale
                    for s in range(n):
                        logit[s] += qc * keys[h, c, s]
                top = np.float32(-np.inf)
                for s in range(n):
                    top = max(top, logit[s])
                total = np.float32(0.0)
                for s in range(n):
                    logit[s] = exp32(logit[s] - top)
                    total += logit[s]
                for j in range(V):
                    mix[j] = 0.0
                for s in range(n):
                    p = logit[s] / total
                    for j in range(V):
                        mix[j] += p * vals[h, s, j]
                for j in range(V):
                    out[b, t, h * V + j] = mix[j] * sigmoid32(gate[h * V + j])


# ---- routed experts -----------------------------------------------------------------------------------------

@njit(inline="always")
def _gate_up_pair(wg, wu, e, z, gate, up):
    # one (token, slot) pair: gate, up [f] = W_gate,e z and W_up,e z (wg, wu [E, f, l], [out, in]; z [l])
    for a in range(wg.shape[1]):
        g = np.float32(0.0)
        u = np.float32(0.0)
        for c in range(wg.shape[2]):
            g += wg[e, a, c] * z[c]
            u += wu[e, a, c] * z[c]
        gate[a] = g
        up[a] = u


@njit(fastmath=_REORDER, **_LOOP)
def gate_up(z, idx, wg, wu, G, U):
    # z [N, l]; idx [N, k]; wg, wu [E, f, l] ([out, in]); G, U [N, k, f] = each pair's z W_gate^T, z W_up^T
    N, k = idx.shape
    for n in range(N):
        for s in range(k):
            _gate_up_pair(wg, wu, idx[n, s], z[n], G[n, s], U[n, s])


@njit(fastmath=_REORDER, **_LOOP)
def down(h, idx, p, wd, out):
    # h [N, k, f]; idx, p [N, k]; wd [E, l, f]; out [N, l] = sum_s p[n, s] h[n, s] W_down[idx[n, s]]^T
    N, k = idx.shape
    w, f = wd.shape[1], wd.shape[2]
    for n in range(N):
        for c in range(w):
            out[n, c] = 0.0
        for s in range(k):
            e = idx[n, s]
            ps = p[n, s]
            for c in range(w):
                acc = np.float32(0.0)
                for a in range(f):
                    acc += wd[e, c, a] * h[n, s, a]
                out[n, c] += ps * acc


# ---- the router's top-k -----------------------------------------------------------------------------------------
# torch.topk's per-row selection mispredicts a branch on almost every element of fresh scores. Here the branches
# are few: a bar is found by bisection over integer keys of the maxima of `group`-strided groups (m groups reach
# it, so m values do), the groups that reach it give the candidates (~m + 2 of 896), and each candidate's place is
# its rank among them.

@intrinsic
def _bits_of_float(typingctx, value):
    # the IEEE 754 bit pattern of a float32, as an int32
    if value != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(value), codegen


@njit(inline="always")
def order_key(v):
    """An int32 in the order of the float32 v (+0 and -0 alike; beyond +-0x7F800000, the infinities, a NaN):
    integer comparisons and maxima vectorise where float ones would need the no-NaN assumption."""
    b = _bits_of_float(v)
    return b if b >= 0 else np.int32(-(b & np.int32(0x7FFFFFFF)))


@njit(inline="always")
def _is_nan_key(b):
    return (b > np.int32(0x7F800000)) | (b < np.int32(-0x7F800000))


@njit(inline="always")
def _select(x, key, m, gmax, groups, cand, cv, vals, ids):
    # x [E] one row and key [E] its order keys, no NaN; vals, ids [m]: its m largest values, largest first, equal
    # values by index. gmax [G], groups [G], cand [E], cv [E]: scratch (G = E // group, E = group * G).
    E, G = x.shape[0], gmax.shape[0]
    group = E // G
    for j in range(G):                                  # group j: experts j, j + G, ...
        gmax[j] = key[j]
    for i in range(1, group):                           # (contiguous inner loops: vectorised)
        for j in range(G):
            gmax[j] = max(gmax[j], key[i * G + j])
    lo = np.int64(gmax[0])
    hi = lo
    for j in range(G):
        lo = min(lo, np.int64(gmax[j]))
        hi = max(hi, np.int64(gmax[j]))
    hi += 1                                             # at least m group maxima >= lo; fewer than m >= hi
    while True:
        t = lo + (hi - lo) // 2
        if t == lo:
            break
        c = 0
        for j in range(G):
            c += gmax[j] >= t
        if c >= m:
            lo = t
            if c <= m + 1:
                break
        else:
            hi = t
    bar = np.int32(lo)
    ng = 0
    for j in range(G):                                  # branch-free: each index written, kept if it counts
        groups[ng] = j
        ng += gmax[j] >= bar
    c = 0
    for a in range(ng):
        j = groups[a]
        for i in range(group):
            e = i * G + j
            cand[c] = e
            c += key[e] >= bar
    for a in range(c):
        cv[a] = x[cand[a]]
    if c <= 4 * m:
        for a in range(c):                              # rank: larger values first, equal ones by index
            v, e = cv[a], cand[a]
            rank = 0
            for b in range(c):
                w = cv[b]
                rank += (w > v) | ((w == v) & (cand[b] < e))
            if rank < m:
                vals[rank] = v
                ids[rank] = e
        return
    n = 0                                               # many equal values: insertion, in O(c m)
    for a in range(c):
        v, e = cv[a], cand[a]
        if n < m:
            i = n
            n += 1
        elif v > vals[m - 1] or (v == vals[m - 1] and e < ids[m - 1]):
            i = m - 1
        else:
            continue
        while i > 0 and (vals[i - 1] < v or (vals[i - 1] == v and ids[i - 1] > e)):
            vals[i] = vals[i - 1]
            ids[i] = ids[i - 1]
            i -= 1
        vals[i] = v
        ids[i] = e


@njit(**_LOOP)
def topk(x, m, group, vals, ids):
    # x [R, E]; vals, ids [R, m]: each row's m largest values, largest first, equal values by index (_select), for
    # E a multiple of `group` and m at most E // group. False at a NaN.
    R, E = x.shape
    G = E // group
    key = np.empty(E, dtype=np.int32)
    gmax = np.empty(G, dtype=np.int32)
    groups = np.empty(G, dtype=np.int64)
    cand = np.empty(E, dtype=np.int64)
    cv = np.empty(E, dtype=np.float32)
    for r in range(R):
        nan = 0
        for e in range(E):
            b = order_key(x[r, e])
            key[e] = b
            nan += _is_nan_key(b)
        if nan:
            return False
        _select(x[r], key, m, gmax, groups, cand, cv, vals[r], ids[r])
    return True


# ---- the Attention Residuals read ------------------------------------------------------------------------------

@njit(fastmath=_REORDER, **_LOOP)
def attnres(V, gain, proj, eps, h, a):
    # V [N, S, d] raw sources; gain, proj [d]; h [N, d]; a [N, S]. Per token, as AttnResQuery: the logit of source s
    # is RMSNorm_nogain(V_s) . (gain * proj) = (V_s . w) / sqrt(mean(V_s^2) + eps); a = softmax over s; h = a V
    N, S, d = V.shape
    w = np.empty(d, dtype=np.float32)
    for c in range(d):
        w[c] = gain[c] * proj[c]
    for n in range(N):
        top = np.float32(-np.inf)
        for s in range(S):
            ss = np.float32(0.0)
            dot = np.float32(0.0)
            for c in range(d):
                v = V[n, s, c]
                ss += v * v
                dot += v * w[c]
            logit = dot / np.sqrt(ss / np.float32(d) + eps)
            a[n, s] = logit
            top = max(top, logit)
        total = np.float32(0.0)
        for s in range(S):
            e = exp32(a[n, s] - top)
            a[n, s] = e
            total += e
        for s in range(S):
            a[n, s] /= total
        for c in range(d):
            h[n, c] = 0.0
        for s in range(S):                                  # over the width inside: vectorised
            weight = a[n, s]
            for c in range(d):
                h[n, c] += weight * V[n, s, c]


# ---- RMSNorm -------------------------------------------------------------------------------------------------------

@njit(fastmath=_REORDER, **_LOOP)
def rms_norm(x, gain, eps, out):
    # x, out [R, D]; gain [D]: model.norms.RMSNorm, x / sqrt(mean(x^2) + eps) * gain per row
    for r in range(x.shape[0]):
        for c in range(x.shape[1]):
            out[r, c] = x[r, c]
        _rms_gain(out[r], gain, eps)


# ---- a whole MoE layer -------------------------------------------------------------------------------------------

@njit(fastmath=_REORDER, **_LOOP)
def moe(x, s, bias, forced, blocked, k, m, group, w_down, gain, eps, w_up, scale, wg, wu, wd, sg, su, sd, act,
        beta_gate, beta_up, idx, p, cut, y):
    """model.moe.LatentMoE.forward after its router's scores s = sigmoid(x W_r^T) [N, E], for x [N, d] (False at a
    NaN score):
    * per token, the selection of model.moe.route: the forced experts (forced [nf]) in the first slots, then the
      m largest of s[n] + bias ([N, E] sigmoid scores, [E]) among the experts not blocked (blocked [E]: 1 for a forced
      or knocked-out expert), by _select; m = free + 1 for the free = k - nf slots and the cutoff, or free when that
      is every expert; E a multiple of `group`, m at most E // group. idx[n] [k] the experts, cut[n] the (free+1)-th
      biased score (-inf when m = free), p[n] [k] their raw scores renormalised to sum 1; and the latent z = W_down
      x (w_down [l, d]);
    * the routed experts per (token, slot) pair, in expert order so that each expert's rows are read once and the
      layer's weights stream through in address order: act(W_g,i z, W_u,i z), then W_d,i of it (wg, wu [E, f, l],
      wd [E, l, f]);
    * per token, u = scale sum_i p_i E_i(z), the routed output W_up RMSNorm(u) (gain [l], eps; w_up [d, l]) plus the
      shared experts sd act(sg x, su x) (sg, su [fs, d], sd [d, fs]): y[n] [d].
    `act`, beta_gate, beta_up: glu32's."""
    N, d = x.shape
    E = s.shape[1]
    G = E // group
    nf = forced.shape[0]
    free = k - nf
    l, f, fs = w_down.shape[0], wg.shape[1], sg.shape[0]
    row = np.empty(E, dtype=np.float32)
    key = np.empty(E, dtype=np.int32)
    gmax = np.empty(G, dtype=np.int32)
    groups = np.empty(G, dtype=np.int64)
    cand = np.empty(E, dtype=np.int64)
    cv = np.empty(E, dtype=np.float32)
    vals = np.empty(m, dtype=np.float32)
    ids = np.empty(m, dtype=np.int64)
    z = np.empty((N, l), dtype=np.float32)
    for n in range(N):
        nan = 0
        for e in range(E):
            v = s[n, e] + bias[e]
            v = v if blocked[e] == 0 else np.float32(-np.inf)
            row[e] = v
            b = order_key(v)
            key[e] = b
            nan += _is_nan_key(b)
        if nan:
            return False
        _select(row, key, m, gmax, groups, cand, cv, vals, ids)
        cut[n] = vals[free] if m > free else -np.inf
        for i in range(nf):
            idx[n, i] = forced[i]
        for i in range(free):
            idx[n, nf + i] = ids[i]
        total = np.float32(0.0)
        for i in range(k):
            total += s[n, idx[n, i]]
        total = max(total, np.float32(1e-30))
        for i in range(k):
            p[n, i] = s[n, idx[n, i]] / total
        _matvec(w_down, x[n], z[n])                         # z = W_down x
    P = N * k                                               # pair n k + i: token n, slot i
    start = np.zeros(E + 1, dtype=np.int64)
    for a in range(P):
        start[idx[a // k, a % k] + 1] += 1
    for e in range(E):
        start[e + 1] += start[e]
    order = np.empty(P, dtype=np.int64)                     # the pairs by expert (a counting sort)
    for a in range(P):
        e = idx[a // k, a % k]
        order[start[e]] = a
        start[e] += 1
    gate = np.empty((P, f), dtype=np.float32)
    up = np.empty((P, f), dtype=np.float32)
    for r in range(P):                                      # each pair's gate and up, in expert order
        a = order[r]
        _gate_up_pair(wg, wu, idx[a // k, a % k], z[a // k], gate[r], up[r])
    if act == 0:                                            # one vectorised pass of the activation
        for r in range(P):
            for h in range(f):
                gate[r, h] = glu32(gate[r, h], up[r, h], 0, beta_gate, beta_up)
    else:
        for r in range(P):
            for h in range(f):
                gate[r, h] = glu32(gate[r, h], up[r, h], 1, beta_gate, beta_up)
    out = np.empty((P, l), dtype=np.float32)                # E_i(z) of each pair, by pair id
    for r in range(P):
        a = order[r]
        _matvec(wd[idx[a // k, a % k]], gate[r], out[a])   # W_d,i h, in expert order
    u = np.empty(l, dtype=np.float32)
    hs = np.empty(fs, dtype=np.float32)
    hu = np.empty(fs, dtype=np.float32)
    shared = np.empty(d, dtype=np.float32)
    routed = np.empty(d, dtype=np.float32)
    for n in range(N):
        for c in range(l):
            u[c] = 0.0
        for i in range(k):                                  # u = scale sum_i p_i E_i(z)
            pi = p[n, i]
            for c in range(l):
                u[c] += pi * out[n * k + i, c]
        for c in range(l):
            u[c] *= scale
        _rms_gain(u, gain, eps)                             # RMSNorm(u) with its gain
        _matvec(sg, x[n], hs)                               # the shared experts' hidden values
        _matvec(su, x[n], hu)
        for h in range(fs):
            hs[h] = glu32(hs[h], hu[h], act, beta_gate, beta_up)
        _matvec(sd, hs, shared)
        _matvec(w_up, u, routed)
        for j in range(d):
            y[n, j] = shared[j] + routed[j]
    return True
