"""An HF Trainer fine-tuning a tiny GPT-2 (built from a config) whose compute_loss takes a masked
mean over the tokens; the fourth batch is all padding, so mask.sum() is 0 and the loss is 0/0.

Arguments: STEPS (6) and PADDED_BATCH (3; -1: none). With STEP_TIMES=FILE in the environment, the
wall-clock and CPU time at the end of each optimizer step are written there (tests/benchmarks/bench_stacks.py)."""
import json
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.utils.data import IterableDataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
PADDED_BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 3
BATCH, LENGTH, VOCAB = 4, 12, 32


class Tokens(IterableDataset):
    def __iter__(self):
        generator = torch.Generator().manual_seed(0)
        for index in range(STEPS * BATCH):
            ids = torch.randint(1, VOCAB, (LENGTH,), generator=generator)
            mask = torch.ones(LENGTH, dtype=torch.long)
            if index // BATCH == PADDED_BATCH:
                ids, mask = torch.zeros(LENGTH, dtype=torch.long), torch.zeros(LENGTH, dtype=torch.long)
            yield {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}


class MaskedMeanTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mask = inputs["attention_mask"][:, 1:].float()
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        logits = outputs.logits[:, :-1]
        token_loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), inputs["labels"][:, 1:].reshape(-1),
                                     reduction="none").view_as(mask)
        loss = (token_loss * mask).sum() / mask.sum()
        return (loss, outputs) if return_outputs else loss


class StepTimes(TrainerCallback):
    def __init__(self):
        self.times = []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append((time.perf_counter(), time.process_time()))


torch.manual_seed(0)
step_times = StepTimes()
model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=16, n_layer=2, n_head=2))
with tempfile.TemporaryDirectory() as output_dir:
    arguments = TrainingArguments(output_dir=output_dir, max_steps=STEPS, per_device_train_batch_size=BATCH,
                                  learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
                                  use_cpu=True, disable_tqdm=True, seed=0)
    trainer = MaskedMeanTrainer(model=model, args=arguments, train_dataset=Tokens(), callbacks=[step_times])
    trainer.train()
    if os.environ.get("STEP_TIMES"):
        with open(os.environ["STEP_TIMES"], "w") as file:
            json.dump(step_times.times, file)
    for entry in trainer.state.log_history:
        if "loss" in entry:
            print(f"step {entry['step']}: loss {entry['loss']} grad_norm {entry.get('grad_norm')}")
