"""Write a tiny random Llama model and a small BPE tokenizer into DIR (for a real vLLM CPU server).

    python make_tiny_model.py DIR      (run with the vLLM environment's Python: transformers, tokenizers)
"""
import sys

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
words = "the of and to in is was for on that with as by at from his an were are which this be or has had".split()
text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(400)]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=1000, special_tokens=["<unk>", "<s>", "</s>"],
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
fast.save_pretrained(out)
cfg = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2)
LlamaForCausalLM(cfg).save_pretrained(out)
print(out)
