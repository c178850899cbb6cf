"""The one description of the benchmarked models, shared by run_benchmarks.py (mwb-train's flags) and
torch_gpt.py (the PyTorch model and optimizer): every option that changes the work is set here, by its
Megatron-LM name, and both sides read it from here, so neither falls back to a default of its own
(mwb-train's are Megatron-LM's, the demo preset's or PyTorch's may differ)."""

# Options that are the same for every shape.
COMMON = {
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "init_method_std": 0.02,
    "layernorm_epsilon": 1e-5,
    "make_vocab_size_divisible_by": 128,
    "untie_embeddings_and_output_weights": False,
    "lr": 1e-4,
    "min_lr": 0.0,
    "lr_warmup_iters": 0,
    "lr_decay_style": "constant",
    "weight_decay": 0.01,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-8,
    "clip_grad": 1.0,
    "seed": 1234,
}

SHAPES = {
    "config S": {"num_layers": 6, "hidden_size": 384, "num_attention_heads": 6, "seq_length": 256,
                 "micro_batch_size": 4, "vocab_size": 50257},
    "GPT-2 124M": {"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "seq_length": 1024,
                   "micro_batch_size": 4, "vocab_size": 50257},
}


def model(name):
    """Every option of one benchmarked model (global batch = micro batch: one micro-batch per step)."""
    m = dict(COMMON, **SHAPES[name])
    m["global_batch_size"] = m["micro_batch_size"]
    m["ffn_hidden_size"] = 4 * m["hidden_size"]
    m["max_position_embeddings"] = m["seq_length"]
    return m


def padded_vocab(m):
    """NullTokenizer: vocab_size ids (EOD among them, current Megatron-LM), padded as Megatron-LM pads."""
    q = m["make_vocab_size_divisible_by"]
    return (m["vocab_size"] + q - 1) // q * q


def mwb_flags(m):
    """mwb-train's flags for every option of `m` (booleans as --flag=true/false)."""
    flags = []
    for key, value in m.items():
        flag = "--" + key.replace("_", "-")
        flags += [f"{flag}={'true' if value else 'false'}"] if isinstance(value, bool) else [flag, str(value)]
    return flags
