"""``gradscope.utils.data``: datasets, samplers and the DataLoader that training scripts iterate,
with PyTorch's names and batching rules. Loading always happens in the calling process
(``num_workers`` is accepted and has no effect), so a script behaves the same on both engines."""
from gradscope.utils.data.dataloader import DataLoader, default_collate, default_convert
from gradscope.utils.data.dataset import (ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset,
                                          random_split)
from gradscope.utils.data.sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                                          SubsetRandomSampler)

__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset", "RandomSampler",
           "Sampler", "SequentialSampler", "Subset", "SubsetRandomSampler", "TensorDataset", "default_collate", "default_convert",
           "random_split"]
