"""Write a tiny Llama model and a small BPE tokenizer into DIR (for a real vLLM CPU server and the self-test).

    python make_tiny_model.py DIR      (run with the vLLM environment's Python: torch, transformers, tokenizers)

The corpus is lines of WORDS in order (each word followed by the next one, wrapping around). The model is
trained on it for a few seconds, so it predicts the next word: a real, if tiny, language model whose
LAMBADA-style last-word accuracy is known (lines that follow the order: right; lines that break it: wrong).
The tokenizer carries a minimal chat template (the messages' contents, nothing added) for the chat endpoint.
"""
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = "the of and to in is was for on that with as by at from his an were are which this be or has had".split()


def line(start: int, n: int) -> str:
    return " ".join(WORDS[(start + j) % len(WORDS)] for j in range(n))


out = sys.argv[1]
text = [line(i * 7, 40) for i in range(400)]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=1000, special_tokens=["<unk>", "<s>", "</s>"],
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
# vLLM's /v1/chat/completions needs a chat template: the messages' contents as they are, so a chat request's prompt is
# the same text (and tokens) as a completion's (tests/integration/test_chat_sweep.py); completions never apply it.
fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
fast.save_pretrained(out)
cfg = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
model = LlamaForCausalLM(cfg)
batch = torch.tensor([fast(line(i, 40), add_special_tokens=False).input_ids[:40] for i in range(len(WORDS))])
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(150):
    loss = model(batch, labels=batch).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"{out}: trained to loss {loss.item():.4f}")
model.save_pretrained(out)
