#!/usr/bin/python3
"""Writes whole networks as one tessel def, so a model file is reproducible from its recipe.

    scripts/model_gen.py resnet50 > workloads/models/resnet50.tsl
    scripts/model_gen.py --weights DIR resnet50      # DIR/NAME.npy per weight, for tessel run --input-dir

resnet50: ResNet-50 v1.5 (torchvision's layout: the stride of a downsampling bottleneck sits on its
3x3 convolution), NHWC, f16 activations and weights, f32 accumulation, every stored activation f16.
Batch norm is folded into a per-channel scale and bias (inference), so each convolution is
`conv -> * scale(k) + bias(k) -> relu` with the relu left out where torchvision has none (the third
convolution of a block relus after the residual add; the projection shortcut has no relu).
"""

import sys

# (blocks, bottleneck width, stride of the stage's first block) per stage, torchvision layer1..4
RESNET50_STAGES = [(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)]
EXPANSION = 4


def resolution(level):
    """Height and width after `level` stride-2 steps from the input (H, W): a 3x3/2 or 7x7/2 window
    with padding 1 or 3, or a 1x1/2 read, maps a size S to (S - 1) / 2 + 1, and two such steps
    compose to (S - 1) / 4 + 1."""
    if level == 0:
        return "H", "W"
    d = 2 ** level
    return f"(H - 1) / {d} + 1", f"(W - 1) / {d} + 1"


def at(v, stride, off=""):
    return f"{v} * {stride}{off}" if stride != 1 else (f"{v}{off}" if off else v)


class Net:
    def __init__(self):
        self.inputs = []   # the signature's lines of inputs
        self.params = []   # (name, shape, dtype) of every weight input
        self.lines = []

    def weight(self, name, shape, dtype="f16", new_line=False):
        """A def input; `new_line` starts a new line of the signature (one line per convolution)."""
        text = f"{dtype}[{', '.join(str(s) for s in shape)}] {name}"
        self.params.append((name, shape, dtype))
        if new_line or not self.inputs:
            self.inputs.append(text)
        else:
            self.inputs[-1] += ", " + text

    def emit(self, text=""):
        self.lines.append(text)

    def conv(self, name, x, cin, cout, k, stride, level_in, relu=True, residual=None):
        """A convolution `name` (k x k, stride, padding k // 2) of the f16 activation `x` at
        resolution `level_in`, batch norm folded as name_s, name_b; stores f16 `name`. Returns the
        resolution level of its output."""
        level_out = level_in + (1 if stride == 2 else 0)
        hout, wout = resolution(level_out)
        pad = k // 2
        acc = f"{name}_acc"
        self.weight(f"{name}_w", [k, k, cin, cout] if k > 1 else [cin, cout], new_line=True)
        self.weight(f"{name}_s", [cout], "f32")
        self.weight(f"{name}_b", [cout], "f32")
        where = f"where p in 0:{hout}, q in 0:{wout}" if (stride != 1 or k > 1) else ""
        if k > 1:
            hin, win = resolution(level_in)
            xp = f"{name}_in"
            hi = f"{hin} + {pad - 1}" if pad > 1 else hin
            wi = f"{win} + {pad - 1}" if pad > 1 else win
            self.emit(f"  {xp}(n, h, w, c) = select(h >= {pad} && h <= {hi} && w >= {pad} && w <= {wi}, "
                      f"{x}(n, h - {pad}, w - {pad}, c), 0)")
            hp = f"{hin} + {2 * pad}"
            wp = f"{win} + {2 * pad}"
            self.emit(f"      where h in 0:{hp}, w in 0:{wp}")
            self.emit(f"  {acc}(n, p, q, k) +=! f32({xp}(n, {at('p', stride, ' + r')}, {at('q', stride, ' + s')}, c))"
                      f" * f32({name}_w(r, s, c, k))")
        else:
            self.emit(f"  {acc}(n, p, q, k) +=! f32({x}(n, {at('p', stride)}, {at('q', stride)}, c))"
                      f" * f32({name}_w(c, k))")
        if where:
            self.emit(f"      {where}")
        value = f"{acc}(n, p, q, k) * {name}_s(k) + {name}_b(k)"
        out = name
        if residual is not None:
            value += f" + f32({residual}(n, p, q, k))"
            out = name.rsplit("_", 1)[0]
        if relu:
            value = f"max({value}, 0)"
        self.emit(f"  {out}(n, p, q, k) = f16({value})")
        return level_out, out


def resnet50_net():
    net = Net()
    net.emit("  # stem: 7x7/2 convolution (padding 3) + bn + relu, 3 -> 64 channels, 224 -> 112")
    level, x = net.conv("conv1", "X", 3, 64, 7, 2, 0)
    net.emit("  # 3x3/2 max pool (padding 1), 112 -> 56; its input is a relu output (>= 0), so zero padding")
    net.emit("  # gives the same maxima as torchvision's -inf padding")
    h1, w1 = resolution(1)
    h2, w2 = resolution(2)
    net.emit(f"  pool_in(n, h, w, c) = select(h >= 1 && h <= {h1} && w >= 1 && w <= {w1}, conv1(n, h - 1, w - 1, c), 0)")
    net.emit(f"      where h in 0:{h1} + 2, w in 0:{w1} + 2")
    net.emit("  pool(n, p, q, c) max=! pool_in(n, p * 2 + i, q * 2 + j, c)")
    net.emit(f"      where p in 0:{h2}, q in 0:{w2}, i in 0:3, j in 0:3")
    level, x, cin = 2, "pool", 64
    sizes = {2: 56, 3: 28, 4: 14, 5: 7}
    for stage, (blocks, width, first_stride) in enumerate(RESNET50_STAGES, start=1):
        cout = width * EXPANSION
        for b in range(blocks):
            stride = first_stride if b == 0 else 1
            name = f"l{stage}_{b}"
            project = b == 0
            lo = level + (1 if stride == 2 else 0)
            what = (f"{cin} -> {width} -> {cout} channels"
                    + (f", stride 2 on the 3x3 ({sizes[level]} -> {sizes[lo]})" if stride == 2 else f", {sizes[lo]}x{sizes[lo]}")
                    + (", projection shortcut (1x1" + ("/2" if stride == 2 else "") + " + bn)" if project else ", identity shortcut"))
            net.emit()
            net.emit(f"  # layer{stage}.{b}: bottleneck {what}")
            shortcut = x
            if project:
                _, shortcut = net.conv(f"{name}_proj", x, cin, cout, 1, stride, level, relu=False)
            l1, a = net.conv(f"{name}_a", x, cin, width, 1, 1, level)
            l2, bb = net.conv(f"{name}_b", a, width, width, 3, stride, l1)
            level, x = net.conv(f"{name}_c", bb, width, cout, 1, 1, l2, residual=shortcut)
            cin = cout
    h5, w5 = resolution(5)
    net.emit()
    net.emit("  # head: global average pool (7x7 -> 1), 2048 -> 1000 classifier")
    net.emit(f"  gap(n, c) +=! f32({x}(n, h, w, c))")
    net.emit(f"  pooled(n, c) = f16(gap(n, c) / f32(({h5}) * ({w5})))")
    net.weight("fc_w", [2048, 1000], new_line=True)
    net.weight("fc_b", [1000], "f32")
    net.emit("  fc(n, k) +=! f32(pooled(n, c)) * f32(fc_w(c, k))")
    net.emit("  Y(n, k) = fc(n, k) + fc_b(k)")
    return net


def resnet50():
    net = resnet50_net()
    out = []
    out.append("# ResNet-50 v1.5 (torchvision's layout: a downsampling bottleneck strides on its 3x3 convolution)")
    out.append("# as one def: the 7x7/2 stem, a 3x3/2 max pool, 16 bottleneck blocks in stages of 3, 4, 6, 3")
    out.append("# (4 of them with a 1x1 projection shortcut), global average pool and the 2048 -> 1000")
    out.append("# classifier: 53 convolutions. NHWC, f16 activations and weights, f32 accumulation, every stored")
    out.append("# activation f16. Batch norm is folded into a per-channel scale (_s) and bias (_b): each convolution")
    out.append("# is conv -> * scale + bias -> relu; a block's last convolution adds the shortcut before its relu.")
    out.append("# 1x1 weights are [C, K], k x k weights [R, S, C, K]; zero padding is a select the compiler folds")
    out.append("# into the convolution that reads it.")
    out.append("# Input N x H x W x 3 (224 x 224 for the real net). Resolutions: stem (H - 1) / 2 + 1 (112), after the")
    out.append("# pool (H - 1) / 4 + 1 (56), then (H - 1) / 8 + 1 (28), (H - 1) / 16 + 1 (14), (H - 1) / 32 + 1 (7).")
    out.append("# Generated by scripts/model_gen.py resnet50; edit the script, not this file.")
    sig = ",\n             ".join(["f16[N, H, W, 3] X"] + net.inputs)
    out.append(f"def resnet50({sig})\n    -> (f32[N, 1000] Y) {{")
    out.extend(net.lines)
    out.append("}")
    return "\n".join(out) + "\n"


def write_weights(net, directory, seed=0):
    """Every weight input of `net` as DIR/NAME.npy for `tessel run --input-dir DIR`, drawn like a
    trained network's scale so 53 layers neither overflow f16 nor vanish (uniform [-2, 2] inputs,
    tessel run's default, give inf and then NaN after a few blocks): convolution weights
    N(0, 2 / fan_in) (He), folded batch-norm scales in [0.5, 1] (a block's last convolution
    [0.1, 0.3], as a small final gamma keeps the residual sum bounded), biases in [-0.1, 0.1],
    the classifier N(0, 1 / 2048). The input image X is left to tessel run."""
    import os
    import numpy as np
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    for name, shape, dtype in net.params:
        if name.endswith("_w"):
            fan_in = int(np.prod(shape[:-1]))
            gain = 1.0 if name == "fc_w" else 2.0
            value = rng.normal(0.0, np.sqrt(gain / fan_in), shape)
        elif name.endswith("_s"):
            low, high = (0.1, 0.3) if name.endswith("_c_s") else (0.5, 1.0)
            value = rng.uniform(low, high, shape)
        else:
            value = rng.uniform(-0.1, 0.1, shape)
        np.save(os.path.join(directory, name + ".npy"), value.astype(np.float16 if dtype == "f16" else np.float32))


MODELS = {"resnet50": (resnet50, resnet50_net)}

if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--weights" and args[2] in MODELS:
        write_weights(MODELS[args[2]][1](), args[1])
    elif len(args) == 1 and args[0] in MODELS:
        sys.stdout.write(MODELS[args[0]][0]())
    else:
        sys.exit(f"usage: {sys.argv[0]} [--weights DIR] {{{'|'.join(MODELS)}}}")
