"""Data for the lab: corpora, tokenizers, cached token streams, batches and synthetic tasks."""

from .cache import default_cache_dir, token_stream
from .corpora import SPLITS, Corpus, load_corpus
from .synthetic import TASKS, TaskBatch, make_task
from .tokenizer import Tokenizer, build_tokenizer, load_tokenizer

__all__ = ["SPLITS", "TASKS", "Corpus", "TaskBatch", "Tokenizer", "build_tokenizer",
           "default_cache_dir", "load_corpus", "load_tokenizer", "make_task", "token_stream"]
