#!/usr/bin/python3
"""PyTorch peers of the roofline suite's instances (scripts/roofline_suite.py --peers torch).

build(torch, inst) returns a callable that computes the instance's operator at its measured shape,
the way a PyTorch user would write it: the library call for the operator (matmul / einsum,
conv2d / conv3d with channels_last for NHWC, the normalisation functions, pooling, interpolate,
a copy of a permuted view, reductions), on tensors of the instance's dtypes and layouts. Outputs
may be in the input dtype where PyTorch's natural call gives that (f16 matmul): the peer is what a
user would run, not a bit-for-bit copy of the def. Imported only on a GPU machine.
"""


def build(torch, inst):
    F = torch.nn.functional
    s = inst.shape
    dev = "cuda"
    dt = {"f16": torch.float16, "f32": torch.float32, "i8": torch.int8}[inst.dtype]
    h, f = torch.float16, torch.float32

    def r(*dims, dtype=dt):
        if dtype == torch.int8:
            return torch.randint(-8, 9, dims, device=dev, dtype=dtype)
        return torch.randn(*dims, device=dev, dtype=dtype)

    def cl(x):  # NHWC / NDHWC storage of a logical NCHW / NCDHW tensor
        return x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)

    key = inst.torch
    B, H, S, T, D = (s.get(k) for k in ("B", "H", "S", "T", "D"))
    if key == "attn_scores_bshd":
        q, k = r(B, S, H, D), r(B, T, H, D)
        return lambda: torch.einsum("bihd,bjhd->bhij", q, k)
    if key == "attn_scores_bhsd":
        q, k = r(B, H, S, D), r(B, H, T, D)
        return lambda: torch.matmul(q, k.transpose(-1, -2))
    if key == "attn_context_bshd":
        p, v = r(B, H, S, T), r(B, T, H, D)
        return lambda: torch.einsum("bhij,bjhd->bihd", p, v)
    if key == "attn_context_bhsd":
        p, v = r(B, H, S, T), r(B, H, T, D)
        return lambda: torch.matmul(p, v)
    M, N, K = s.get("M"), s.get("N"), s.get("K")
    if key == "bmm_shared_weight":
        a, w = r(B, M, K), r(K, N)
        return lambda: torch.matmul(a, w)
    if key == "bmm":
        x, y = r(B, M, K), r(B, K, N)
        return lambda: torch.bmm(x, y)
    if key in ("gemm_nn", "gemm_tn", "gemm_nt", "gemm_tt"):
        major = key[-2:]
        a = r(M, K) if major[0] == "n" else r(K, M).t()
        b = r(K, N) if major[1] == "n" else r(N, K).t()
        return lambda: torch.matmul(a, b)
    if key == "gemm_i8_dequant":
        a, b, scale = r(M, K), r(K, N), r(N, dtype=f)
        return lambda: (torch._int_mm(a, b).to(f) * scale).to(h)
    if key == "gemv":
        a, x = r(M, K), r(K)
        return lambda: torch.mv(a, x)
    conv = conv_peer(torch, F, key, s, r, cl)
    if conv:
        return conv
    rest = norm_pool_move_peer(torch, F, key, s, r, cl, h, f)
    if rest:
        return rest
    raise KeyError(f"no PyTorch peer for {inst.name} (torch key {key!r})")


def conv_peer(torch, F, key, s, r, cl):
    N, C, K, R, S_ = (s.get(k) for k in ("N", "C", "K", "R", "S"))
    P, Q, G = s.get("P"), s.get("Q"), s.get("G")
    nhwc = "nhwc" in key or "ndhwc" in key
    lay = cl if nhwc else (lambda x: x)
    if key in ("conv_nhwc", "conv_1x1_nhwc"):
        x, w = lay(r(N, C, s["H"], s["W"])), lay(r(K, C, R or 1, S_ or 1))
        pad = 1 if key == "conv_nhwc" else 0
        return lambda: F.conv2d(x, w, padding=pad)
    if key == "conv_nchw":
        x, w = r(N, C, P + R - 1, Q + S_ - 1), r(K, C, R, S_)
        return lambda: F.conv2d(x, w)
    if key in ("conv_grouped_nhwc", "conv_grouped_nchw"):
        x, w = lay(r(N, G * C, P + R - 1, Q + S_ - 1)), lay(r(G * K, C, R, S_))
        return lambda: F.conv2d(x, w, groups=G)
    if key in ("conv3d_ndhwc", "conv3d_ncdhw"):
        O, T = s["O"], s["T"]
        x, w = lay(r(N, C, O + T - 1, P + R - 1, Q + S_ - 1)), lay(r(K, C, T, R, S_))
        return lambda: F.conv3d(x, w)
    if key == "depthwise_nhwc":
        x, w = lay(r(N, C, s["H"], s["W"])), lay(r(C, 1, R, S_))
        return lambda: F.conv2d(x, w, padding=1, groups=C)
    if key == "depthwise_nchw":
        x, w = r(N, C, P + R - 1, Q + S_ - 1), r(C, 1, R, S_)
        return lambda: F.conv2d(x, w, groups=C)
    if key in ("conv_dilated_nhwc", "conv_dilated_nchw"):
        x, w = lay(r(N, C, P + 2 * R - 2, Q + 2 * S_ - 2)), lay(r(K, C, R, S_))
        return lambda: F.conv2d(x, w, dilation=2)
    if key == "conv_1x1_s2_nhwc":
        x, w = lay(r(N, C, 2 * P - 1, 2 * Q - 1)), lay(r(K, C, 1, 1))
        return lambda: F.conv2d(x, w, stride=2)
    if key in ("conv_s2_nhwc", "conv_s2_nchw"):
        x, w = lay(r(N, C, 2 * P + R - 2, 2 * Q + S_ - 2)), lay(r(K, C, R, S_))
        return lambda: F.conv2d(x, w, stride=2)
    return None


def norm_pool_move_peer(torch, F, key, s, r, cl, h, f):
    g = s.get
    # Parameters in the input dtype: PyTorch's fused kernels compute in f32 inside, as the defs do.
    if key == "layer_norm":
        x, gamma, beta = r(g("M"), g("N")), r(g("N")), r(g("N"))
        return lambda: F.layer_norm(x, (g("N"),), gamma, beta, 1e-5)
    if key == "rms_norm":
        x, gamma = r(g("M"), g("N")), r(g("N"))
        return lambda: F.rms_norm(x, (g("N"),), gamma, 1e-5)
    if key == "group_norm":  # [N, I, G, E]: channels G*E last, so the channel-first view is a permute
        x = r(g("N"), g("I"), g("G") * g("E"))
        gamma, beta = r(g("G") * g("E")), r(g("G") * g("E"))
        return lambda: F.group_norm(x.transpose(1, 2), g("G"), gamma, beta, 1e-5)
    if key == "bn_train_nhwc":
        x = cl(r(g("N"), g("C"), g("H"), g("W")))
        gamma, beta = r(g("C")), r(g("C"))
        return lambda: F.batch_norm(x, None, None, gamma, beta, training=True, eps=1e-5)
    if key == "bn_infer_nchw":
        x = r(g("N"), g("C"), g("H"), g("W"))
        mean, var, gamma, beta = (r(g("C")) for _ in range(4))
        var = var.abs()
        return lambda: F.batch_norm(x, mean, var, gamma, beta, training=False, eps=1e-5)
    if key == "maxpool3_s2_nhwc":
        x = cl(r(g("N"), g("C"), 2 * g("P") + 1, 2 * g("Q") + 1))
        return lambda: F.max_pool2d(x, 3, 2)
    if key == "maxpool2_s2_nchw":
        x = r(g("N"), g("C"), 2 * g("P"), 2 * g("Q"))
        return lambda: F.max_pool2d(x, 2, 2)
    if key == "avgpool3_s1_nhwc":
        x = cl(r(g("N"), g("C"), g("P") + 2, g("Q") + 2))
        return lambda: F.avg_pool2d(x, 3, 1)
    if key == "avgpool2_s2_nchw":
        x = r(g("N"), g("C"), 2 * g("P"), 2 * g("Q"))
        return lambda: F.avg_pool2d(x, 2, 2)
    if key == "global_avg_nhwc":
        x = r(g("N"), g("H"), g("W"), g("C"))
        return lambda: x.mean(dim=(1, 2), dtype=f)
    if key == "global_max_nchw":
        x = r(g("N"), g("C"), g("H"), g("W"))
        return lambda: x.amax(dim=(2, 3))
    if key == "upsample_nhwc":
        x = cl(r(g("N"), g("C"), g("H"), g("W")))
        return lambda: F.interpolate(x, scale_factor=2, mode="nearest")
    if key == "upsample_nchw":
        x = r(g("N"), g("C"), g("H"), g("W"))
        return lambda: F.interpolate(x, scale_factor=2, mode="nearest")
    perms = {"permute_021": (("B", "M", "N"), (0, 2, 1)), "nhwc_to_nchw": (("N", "H", "W", "C"), (0, 3, 1, 2)),
             "bshd_to_bhsd": (("B", "S", "H", "D"), (0, 2, 1, 3)),
             "permute5": (("A", "B", "C", "D", "E"), (0, 3, 1, 4, 2))}
    if key in perms:
        dims, perm = perms[key]
        x = r(*(g(d) for d in dims))
        y = torch.empty_like(x.permute(*perm), memory_format=torch.contiguous_format)
        return lambda: y.copy_(x.permute(*perm))
    reductions = {"sum_last": (("M", "N"), lambda x: x.sum(1)), "sum_lead": (("M", "N"), lambda x: x.sum(0)),
                  "max_middle": (("A", "B", "C"), lambda x: x.amax(1)),
                  "sum_outer_two": (("A", "B", "C"), lambda x: x.sum((0, 2))),
                  "sum_all": (("M", "N"), lambda x: x.sum()),
                  "min_hw": (("N", "C", "H", "W"), lambda x: x.amin((2, 3)))}
    if key in reductions:
        dims, op = reductions[key]
        x = r(*(g(d) for d in dims))
        return lambda: op(x)
    M, N = g("M"), g("N")
    if key == "add_mul_sub":
        a, b = r(M, N), r(M, N)
        return lambda: (a * b - a) + b
    if key == "bias_gelu":
        x, b = r(M, N), r(N)
        return lambda: F.gelu(x + b, approximate="tanh")
    if key == "silu_mul":
        a, b = r(M, N), r(M, N)
        return lambda: F.silu(a) * b
    if key == "scale_bias_relu_nchw":
        x, sc, t = r(g("N"), g("C"), g("H"), g("W")), r(g("C"), 1, 1), r(g("C"), 1, 1)
        return lambda: torch.relu(torch.addcmul(t, x, sc))
    return None
