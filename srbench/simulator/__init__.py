"""An OpenAI-compatible simulator of models, a judge, a user and a MoM router (DESIGN §8).

Standalone: it imports neither Django, the database nor the dataset adapters. It plays an
``AnswerKey`` handed to it or saved as JSON (``[answer_key] file``); the project builds keys from
dataset files (``datasets/answer_key.py``). Start it with ``serve()`` or, in tests,
``srbench.simulator.testing.running_simulator()``.
"""

from srbench.simulator.oracle import AnswerKey, judge_block, parse_judge_block

__all__ = ["AnswerKey", "judge_block", "parse_judge_block"]
