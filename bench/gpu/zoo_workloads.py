"""The GPU workload zoo (bench_zoo.py), one concern: the workloads (WORKLOADS,
NEW_WORKLOADS, burst, and smoke, the harness's check), each built by
BUILD[name](torch, dev) into (step, steps, warm-up steps), and what a server
imports for them.

A workload with paced phases (burst) sets two attributes on its step function:
`phases`, [(name, first step, end step)] covering every step, and `pace_s`,
the seconds between two requests' arrivals: the run (zoo_child.py) then
waits, outside the timed part, until step i's arrival time (first step's
start + i * pace_s; no wait for a step that is late), so each phase lasts
the same wall time on every GPU and allocator, and it records a time series
per step (zoo_report.py's phase table). The workload named `phases` (train
steps and evaluation passes alternating) sets neither: its steps run back to
back like the other workloads'.
"""
import random


WORKLOADS = ["kvgen", "cnn", "encoder", "gpt2", "moe", "serve", "sidepipe", "ddp", "fsdp", "prefetch"]
# the side-stream shapes (blocks used on a second stream, handed over with
# wait_stream + record_stream): sidepipe, ddp, fsdp, prefetch. Not in the
# default list: burst (38 s of wall time a run, for the loop's measurement:
# tools/device/gpu-run.sh loopgpu) and smoke
# Issue #36's four, different in kind from the ten (not in the default list,
# so the zoo's commands measure what they did; name them in --workloads):
# phases that alternate, shapes that change every step, host offload, and a
# model family the ten lack (a vision transformer)
NEW_WORKLOADS = ["phases", "shapes", "offload", "vit"]
MIB = 1 << 20


def _llama(torch, dev):
    """kvgen's and burst's model: a small Llama-style decoder, fp16, eval."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=2048)
    return LlamaForCausalLM(cfg).half().to(dev).eval(), cfg


def wl_kvgen(torch, dev):
    model, cfg = _llama(torch, dev)
    pairs = [(1, 64), (16, 128), (2, 1024), (8, 384)]
    rnd = random.Random(1)

    def step(i):
        b, n = pairs[i % len(pairs)]
        ids = torch.randint(3, cfg.vocab_size, (b, n), generator=None, device=dev)
        # left padding of a random part of each row, as a batch of prompts
        mask = torch.ones(b, n, dtype=torch.long, device=dev)
        for r in range(b):
            pad = rnd.randrange(0, max(1, n // 4))
            if pad:
                mask[r, :pad] = 0
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=32,
                                 min_new_tokens=32, do_sample=False, pad_token_id=0)
        return int(out.shape[1])

    return step, 2 * len(pairs), len(pairs)


def cnn_net(torch):
    """cnn's ResNet-style conv net (on the CPU; the caller seeds and moves
    it); bench_maxbatch.py trains it too."""
    import torch.nn as nn

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         block(64, 64, 1), block(64, 128, 2), block(128, 256, 2),
                         block(256, 512, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(512, 1000))


def wl_cnn(torch, dev):
    import torch.nn as nn

    torch.manual_seed(0)
    model = cnn_net(torch).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = [32, 64, 128, 96, 48]
    lossf = nn.CrossEntropyLoss()

    def step(i):
        b = batches[i % len(batches)]
        x = torch.randn(b, 3, 128, 128, device=dev)
        y = torch.randint(0, 1000, (b,), device=dev)
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return b

    return step, 4 * len(batches), 2


def _bert(torch, dev, classify):
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    torch.manual_seed(0)
    cfg = BertConfig()
    return (BertForSequenceClassification(cfg) if classify else BertModel(cfg)).to(dev), cfg


def wl_encoder(torch, dev):
    model, cfg = _bert(torch, dev, True)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    rnd = random.Random(2)
    lens = [rnd.randrange(32, 513) for _ in range(12)]

    def step(i):
        n = lens[i % len(lens)]
        ids = torch.randint(0, cfg.vocab_size, (16, n), device=dev)
        labels = torch.randint(0, 2, (16,), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        return n

    return step, len(lens), 2


def wl_gpt2(torch, dev):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    rnd = random.Random(3)
    lens = [rnd.choice([64, 128, 192, 256, 320, 384, 448, 512]) for _ in range(16)]

    def step(i):
        n = lens[i % len(lens)]
        ids = torch.randint(0, cfg.vocab_size, (8, n), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return n

    return step, len(lens), 2


def wl_moe(torch, dev):
    import torch.nn as nn

    torch.manual_seed(0)
    d, experts, layers = 1024, 8, 4

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(d, experts)
            self.w1 = nn.ModuleList(nn.Linear(d, 4 * d) for _ in range(experts))
            self.w2 = nn.ModuleList(nn.Linear(4 * d, d) for _ in range(experts))

        def forward(self, x):
            e = self.router(x).argmax(-1)
            out = torch.zeros_like(x)
            for k in range(experts):
                idx = (e == k).nonzero(as_tuple=True)[0]
                if idx.numel() == 0:
                    continue
                h = self.w2[k](torch.relu(self.w1[k](x.index_select(0, idx))))
                out = out.index_add(0, idx, h.to(out.dtype))  # h is bf16 under autocast
            return x + out

    model = nn.Sequential(*[MoE() for _ in range(layers)]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rnd = random.Random(4)
    counts = [rnd.randrange(1024, 16385) for _ in range(16)]

    def step(i):
        n = counts[i % len(counts)]
        x = torch.randn(n, d, device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        return n

    return step, len(counts), 2


def wl_serve(torch, dev):
    model, cfg = _bert(torch, dev, False)
    model = model.half().eval()
    rnd = random.Random(5)
    reqs = [(rnd.randrange(1, 65), rnd.randrange(16, 513)) for _ in range(40)]

    def step(i):
        b, n = reqs[i % len(reqs)]
        ids = torch.randint(0, cfg.vocab_size, (b, n), device=dev)
        with torch.inference_mode():
            h = model(input_ids=ids).last_hidden_state
        return int(h.shape[0])

    return step, len(reqs), 2


def _side_cnn(torch, dev):
    """The model the side-stream input workloads train: a small conv net."""
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                          nn.ReLU(), nn.Conv2d(128, 256, 3, 2, 1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100)).to(dev)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


# Six input shapes, cycling: (batch, height, width) of uint8 images.
SIDE_SHAPES = [(64, 224, 224), (32, 320, 320), (96, 160, 160), (48, 256, 256), (128, 128, 128),
               (16, 448, 448)]


def wl_sidepipe(torch, dev):
    """A side-stream input pipeline: uint8 batches in pinned memory, copied to
    the device and transformed (float, normalise, flip) on a second stream,
    handed to the compute stream with wait_stream + record_stream; sizes
    cycle over six shapes. Checks each batch's data on the device."""
    model, opt = _side_cnn(torch, dev)
    side = torch.cuda.Stream(dev)
    host = [torch.randint(0, 255, s + (3,), dtype=torch.uint8).pin_memory() for s in SIDE_SHAPES]
    sums = [int(h.sum(dtype=torch.int64)) for h in host]
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    lossf = torch.nn.CrossEntropyLoss()

    def stage(k):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            raw = host[k].to(dev, non_blocking=True)
            chk = raw.sum(dtype=torch.int64)
            x = raw.permute(0, 3, 1, 2).float().sub_(mean).div_(58.0)
            x = torch.where(torch.rand(x.shape[0], 1, 1, 1, device=dev) < 0.5, x, x.flip(3))
            y = raw[:, 0, 0, 0].long() % 100
            del raw
        return x, y, chk

    nxt = [stage(0)]

    def step(i):
        k = i % len(SIDE_SHAPES)
        x, y, chk = nxt.pop()
        cur = torch.cuda.current_stream()
        cur.wait_stream(side)
        for t in (x, y, chk):
            t.record_stream(cur)
        nxt.append(stage((i + 1) % len(SIDE_SHAPES)))  # the next batch, during this step
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        if int(chk) != sums[k]:
            raise RuntimeError(f"sidepipe: batch {i} arrived corrupted")
        return int(x.shape[0])

    return step, 4 * len(SIDE_SHAPES), 2


def wl_ddp(torch, dev):
    """DDP-like: a transformer-ish MLP stack trained on variable batches;
    after backward the gradients are flattened into buckets on a
    communication stream, "reduced" there (scaled and mixed, as an
    all-reduce would touch them) and copied back; the compute stream waits
    for the bucket before the optimizer step. Buckets are allocated and freed
    on the communication stream; the gradients it reads are record_stream'd."""
    import torch.nn as nn

    torch.manual_seed(0)
    d = 1024
    model = nn.Sequential(*[nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                            for _ in range(6)]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    comm = torch.cuda.Stream(dev)
    params = [p for p in model.parameters()]
    # ~25 MiB buckets, DDP's default cap, in reverse order of the parameters
    buckets, cur, size = [], [], 0
    for p in reversed(params):
        cur.append(p)
        size += p.numel() * 4
        if size >= 25 << 20:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    rnd = random.Random(6)
    counts = [rnd.randrange(2048, 12289) for _ in range(12)]

    def step(i):
        n = counts[i % len(counts)]
        x = torch.randn(n, d, device=dev)
        opt.zero_grad(set_to_none=True)
        loss = model(x).pow(2).mean()
        loss.backward()
        compute = torch.cuda.current_stream()
        comm.wait_stream(compute)
        with torch.cuda.stream(comm):
            for b in buckets:
                grads = [p.grad for p in b]
                for g in grads:
                    g.record_stream(comm)
                flat = torch.cat([g.reshape(-1) for g in grads])
                flat.mul_(0.5).add_(flat.roll(1), alpha=0.5)  # what a 2-rank all-reduce does
                off = 0
                for g in grads:
                    g.copy_(flat[off:off + g.numel()].view_as(g))
                    off += g.numel()
                del flat
        compute.wait_stream(comm)
        opt.step()
        return n

    return step, 2 * len(counts), 2


def wl_fsdp(torch, dev):
    """FSDP-like: each layer's weights live as a flat shard (half of them);
    before its forward (and again before its backward) the full weights are
    gathered on a side stream into a fresh buffer, used on the compute
    stream (record_stream) and freed after; the prefetch runs one layer
    ahead. Gradients of the gathered weights are reduced into the shard."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    d, layers = 2048, 8
    shapes = [(4 * d, d), (4 * d,), (d, 4 * d), (d,)]
    numel = sum(int(torch.Size(s).numel()) for s in shapes)
    shards = [(torch.randn(numel // 2, device=dev) * 0.02).requires_grad_(False)
              for _ in range(layers)]
    side = torch.cuda.Stream(dev)
    rnd = random.Random(7)
    counts = [rnd.randrange(1024, 8193) for _ in range(12)]
    lr = 1e-3

    def gather(k):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            full = torch.cat([shards[k], shards[k].flip(0)])  # the other rank's half
        return full

    def unflat(full):
        out, off = [], 0
        for s in shapes:
            n = int(torch.Size(s).numel())
            out.append(full[off:off + n].view(s))
            off += n
        return out

    def step(i):
        n = counts[i % len(counts)]
        x = torch.randn(n, d, device=dev, requires_grad=False)
        cur = torch.cuda.current_stream()
        acts = [x]
        nxt = gather(0)
        for k in range(layers):  # forward, weights freed after each layer
            full = nxt
            cur.wait_stream(side)
            full.record_stream(cur)
            if k + 1 < layers:
                nxt = gather(k + 1)
            w1, b1, w2, b2 = unflat(full)
            with torch.no_grad():
                acts.append(acts[-1] + F.linear(F.gelu(F.linear(acts[-1], w1, b1)), w2, b2))
            del full, w1, b1, w2, b2
        g = 2 * acts[-1] / acts[-1].numel()
        nxt = gather(layers - 1)
        for k in reversed(range(layers)):  # backward: gather again, reduce into the shard
            full = nxt
            cur.wait_stream(side)
            full.record_stream(cur)
            if k > 0:
                nxt = gather(k - 1)
            w = [t.detach().requires_grad_(True) for t in unflat(full)]
            a = acts[k].detach().requires_grad_(True)
            out = a + F.linear(F.gelu(F.linear(a, w[0], w[1])), w[2], w[3])
            out.backward(g)
            g = a.grad
            flat = torch.cat([t.grad.reshape(-1) for t in w])
            with torch.no_grad():
                shards[k].sub_(flat[:numel // 2] * lr)
            del full, w, a, out, flat
            acts.pop()
        return n

    return step, 2 * len(counts), 2


def wl_prefetch(torch, dev):
    """adaptalloc.torch.Prefetcher feeding a training loop: CPU batches of the
    six cycling shapes (a list standing in for a DataLoader), staged and
    copied to the device on the Prefetcher's side stream while the model
    trains on the previous one. The Prefetcher's pinned staging is
    adaptalloc's under every allocator; the device memory is each
    allocator's."""
    from adaptalloc.torch import Prefetcher

    model, opt = _side_cnn(torch, dev)
    torch.manual_seed(1)
    cpu = [(torch.randint(0, 255, s + (3,), dtype=torch.uint8), ) for s in SIDE_SHAPES]
    sums = [int(b[0].sum(dtype=torch.int64)) for b in cpu]
    lossf = torch.nn.CrossEntropyLoss()
    loader = [cpu[i % len(cpu)] for i in range(4 * len(cpu))]
    it = [None]  # the epoch's iterator

    def step(i):
        if i % len(loader) == 0:  # a new epoch
            it[0] = iter(Prefetcher(loader, dev, background=False))
        (raw,) = next(it[0])
        if int(raw.sum(dtype=torch.int64)) != sums[i % len(cpu)]:
            raise RuntimeError(f"prefetch: batch {i} arrived corrupted")
        x = raw.permute(0, 3, 1, 2).float().div_(255.0)
        y = raw[:, 0, 0, 0].long() % 100
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return int(x.shape[0])

    return step, len(loader), 2


# phases: an evaluation pass after every PHASE_EVERY - 1 training steps
PHASE_EVERY = 4


def wl_phases(torch, dev):
    """Phases that alternate: a GPT-2-style language model (8 layers, 768
    wide, a vocabulary of 8192, AdamW, bf16 autocast) trained at batch 16 x
    256 tokens, and after every third training step an evaluation pass at
    batch 32 x 512 tokens (model.eval(), no_grad, the loss computed): the
    evaluation's working set has other shapes than training's, while the
    training state (weights, AdamW's moments) lives across it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=8192, n_positions=1024, n_embd=768, n_layer=8, n_head=12)
    model = GPT2LMHeadModel(cfg).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step(i):
        if i % PHASE_EVERY == PHASE_EVERY - 1:  # the evaluation pass
            ids = torch.randint(0, cfg.vocab_size, (32, 512), device=dev)
            model.eval()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            model.train()
            del loss
            return 512
        ids = torch.randint(0, cfg.vocab_size, (16, 256), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return 256

    return step, 6 * PHASE_EVERY, 2


def shapes_batches(seed=9, steps=24, tokens=4096):
    """shapes' batches, [(padded length, [each row's length])] per step: the
    padded length drawn from a log-normal distribution of document lengths
    (median about 270 tokens, clipped to 16..1536), as many rows as fit a
    budget of `tokens` tokens, each row between half and all of it long."""
    rnd = random.Random(seed)
    out = []
    for _ in range(steps):
        n = min(1536, max(16, int(rnd.lognormvariate(5.6, 0.7))))
        out.append((n, [rnd.randint(max(1, n // 2), n) for _ in range(max(1, tokens // n))]))
    return out


def wl_shapes(torch, dev):
    """Shapes that change every step: a packing-free causal-LM fine-tune of a
    small Llama-style decoder (6 layers, hidden 768, a vocabulary of 16000,
    AdamW, bf16 autocast). Each step's batch is what a length-bucketing
    loader gives (shapes_batches): a padded length drawn at random, as many
    rows as fit 4096 tokens, each row's own length at random (the rest
    padding, masked out of attention and loss), so batch and length both
    change from step to step and hardly repeat."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=16000, hidden_size=768, intermediate_size=2048,
                      num_hidden_layers=6, num_attention_heads=12, num_key_value_heads=4,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = shapes_batches()

    def step(i):
        n, lens = batches[i % len(batches)]
        ids = torch.randint(3, cfg.vocab_size, (len(lens), n), device=dev)
        mask = (torch.arange(n, device=dev)[None, :] <
                torch.tensor(lens, device=dev)[:, None]).long()
        labels = ids.masked_fill(mask == 0, -100)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        return n

    return step, len(batches), 2


def wl_offload(torch, dev):
    """Host offload: a pre-norm transformer stack (6 nn.TransformerEncoderLayer,
    d 1024, 16 heads, AdamW, bf16 autocast) whose activations saved for the
    backward go to pinned host memory during the forward and come back
    during the backward (torch.autograd.graph.save_on_cpu(pin_memory=True)
    around the stack): every step copies them out and in, and the device
    holds the weights, the optimizer state and a layer's working set at a
    time. Batch 16, the sequence length cycling 256, 512, 384."""
    import torch.nn as nn

    torch.manual_seed(0)
    d = 1024
    stack = nn.Sequential(*[nn.TransformerEncoderLayer(d, 16, 4 * d, dropout=0.0,
                                                       batch_first=True, norm_first=True)
                            for _ in range(6)]).to(dev)
    head = nn.Linear(d, d).to(dev)
    opt = torch.optim.AdamW(list(stack.parameters()) + list(head.parameters()), lr=1e-4)
    lens = [256, 512, 384]

    def step(i):
        n = lens[i % len(lens)]
        x = torch.randn(16, n, d, device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                h = stack(x)
            loss = head(h).float().pow(2).mean()
        loss.backward()
        opt.step()
        return n

    return step, 8 * len(lens), 2


def wl_vit(torch, dev):
    """A model family the other workloads lack: a vision transformer,
    torchvision's VisionTransformer in ViT-B/16's shape (12 layers, 768
    wide, 12 heads, MLP 3072, patches of 16) built without weights for
    160x160 images (100 patches and the class token), trained with AdamW
    under bf16 autocast at batch 48 on random images and labels: one shape
    every step, the steady case."""
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(image_size=160, patch_size=16, num_layers=12, num_heads=12,
                              hidden_dim=768, mlp_dim=3072, num_classes=1000).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lossf = torch.nn.CrossEntropyLoss()

    def step(i):
        x = torch.randn(48, 3, 160, 160, device=dev)
        y = torch.randint(0, 1000, (48,), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return int(x.shape[0])

    return step, 20, 2


# burst's phases, in requests; a request arrives every BURST_PACE_S seconds
# (this module's docstring): 6 s of short requests, 2 s of
# long-context ones, then 30 s of short ones. The loop's trim can act once
# the burst's peak has left its window of recent peaks: 16 intervals of 1 s
# (AA_ADAPT_PEAK_INTERVALS, adapt.interval_ms in policies/default.json), so
# about 16-17 s into the last phase; the 13 s after show what it kept.
BURST_PACE_S = 0.1
BURST_PHASES = (("before", 60), ("burst", 20), ("after", 300))


def burst_requests(seed=8):
    """burst's requests, [(batch, tokens)] per step: short ones (batch 1..4,
    32..256 tokens) around long-context ones (batch 8, 1536..2048 tokens)."""
    rnd = random.Random(seed)
    out = []
    for name, n in BURST_PHASES:
        for _ in range(n):
            if name == "burst":
                out.append((8, rnd.randrange(1536, 2049, 64)))
            else:
                out.append((rnd.randrange(1, 5), rnd.randrange(32, 257, 32)))
    return out


def phase_bounds(phases):
    """[(name, count)] -> [(name, first step, end step)]."""
    out, at = [], 0
    for name, n in phases:
        out.append((name, at, at + n))
        at += n
    return out


def wl_burst(torch, dev):
    """A server's prefill with a phase change: kvgen's Llama-style model (fp16,
    inference) answers one request per step, a request arriving every
    BURST_PACE_S seconds: short prompts, then a burst of long-context
    prompts that takes GiBs for two seconds (the logits of 8 x 2048 tokens
    alone are 1000 MiB), then short prompts again for 30 s. PyTorch's caching
    allocator keeps the burst's memory reserved for the rest of the run
    unless someone calls empty_cache(); adaptalloc's loop gives back what is
    cached above the recent peak (docs/adapt.md, trim). Each step returns the
    request's next tokens' count (greedy, from the last position)."""
    model, cfg = _llama(torch, dev)
    reqs = burst_requests()

    def step(i):
        b, n = reqs[i]
        ids = torch.randint(3, cfg.vocab_size, (b, n), device=dev)
        with torch.inference_mode():
            logits = model(input_ids=ids).logits
            nxt = logits[:, -1].argmax(-1)
        return int(nxt.shape[0])

    step.phases = phase_bounds(BURST_PHASES)
    step.pace_s = BURST_PACE_S
    return step, len(reqs), 2


def wl_smoke(torch, dev):
    """Not a workload: a few allocations, to check the harness quickly."""

    def step(i):
        return int(torch.empty((i + 1) * MIB, dtype=torch.uint8, device=dev).numel())

    return step, 4, 1


BUILD = {"smoke": wl_smoke, "kvgen": wl_kvgen, "cnn": wl_cnn, "encoder": wl_encoder, "gpt2": wl_gpt2,
         "moe": wl_moe, "serve": wl_serve, "sidepipe": wl_sidepipe, "ddp": wl_ddp,
         "fsdp": wl_fsdp, "prefetch": wl_prefetch, "burst": wl_burst, "phases": wl_phases,
         "shapes": wl_shapes, "offload": wl_offload, "vit": wl_vit}


def preload(workloads):
    """What a server imports once for its forked children: torch and the
    transformers classes the workloads use. Nothing here touches CUDA."""
    import torch  # noqa: F401

    names = {"kvgen": ("LlamaConfig", "LlamaForCausalLM"),
             "burst": ("LlamaConfig", "LlamaForCausalLM"),
             "encoder": ("BertConfig", "BertForSequenceClassification", "BertModel"),
             "serve": ("BertConfig", "BertForSequenceClassification", "BertModel"),
             "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
             "phases": ("GPT2Config", "GPT2LMHeadModel"),
             "shapes": ("LlamaConfig", "LlamaForCausalLM")}
    wanted = sorted({n for w in workloads for n in names.get(w, ())})
    if wanted:
        import transformers

        for n in wanted:
            getattr(transformers, n)
    # (vit's torchvision is imported by its run, not here: a server that
    # imports it would do so for every workload's runs)
