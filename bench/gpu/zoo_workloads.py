"""The GPU workload zoo (bench_zoo.py), one concern: the six workloads (and
smoke, the harness's check), each built by BUILD[name](torch, dev) into
(step, steps, warm-up steps), and what a server imports for them.
"""
import random


WORKLOADS = ["kvgen", "cnn", "encoder", "gpt2", "moe", "serve"]
MIB = 1 << 20


def wl_kvgen(torch, dev):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).half().to(dev).eval()
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


def wl_cnn(torch, dev):
    import torch.nn as nn

    torch.manual_seed(0)

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                          block(64, 64, 1), block(64, 128, 2), block(128, 256, 2),
                          block(256, 512, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(512, 1000)).to(dev)
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


def wl_smoke(torch, dev):
    """Not a workload: a few allocations, to check the harness quickly."""

    def step(i):
        return int(torch.empty((i + 1) * MIB, dtype=torch.uint8, device=dev).numel())

    return step, 4, 1


BUILD = {"smoke": wl_smoke, "kvgen": wl_kvgen, "cnn": wl_cnn, "encoder": wl_encoder, "gpt2": wl_gpt2,
         "moe": wl_moe, "serve": wl_serve}


def preload(workloads):
    """What a server imports once for its forked children: torch and the
    transformers classes the workloads use. Nothing here touches CUDA."""
    import torch  # noqa: F401

    names = {"kvgen": ("LlamaConfig", "LlamaForCausalLM"),
             "encoder": ("BertConfig", "BertForSequenceClassification", "BertModel"),
             "serve": ("BertConfig", "BertForSequenceClassification", "BertModel"),
             "gpt2": ("GPT2Config", "GPT2LMHeadModel")}
    wanted = sorted({n for w in workloads for n in names.get(w, ())})
    if wanted:
        import transformers

        for n in wanted:
            getattr(transformers, n)
