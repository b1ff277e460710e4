"""Exercises of lesson 05: an accuracy function and a batch predictor (run in a Ray Data actor pool)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from course_utils.core import batch_format, checkpoints
from course_utils.exercises.checks import correct, not_attempted, ran_but, wrong
from course_utils.lesson05 import inference


def check_accuracy_fn(accuracy: Any, exercise: str = "05.1") -> None:
    """``accuracy(labels, predictions)`` is the share of equal entries; mismatched inputs raise."""
    if not_attempted(exercise, accuracy):
        return None
    if not callable(accuracy):
        raise wrong(exercise, "the answer should be a function accuracy(labels, predictions).")
    labels = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    cases = [(labels, 1.0), (np.array([0, 1, 2, 3, 0, 0, 0, 0]), 0.5), ((labels + 1) % 8, 0.0)]
    for predictions, expected in cases:
        got = accuracy(labels, predictions)
        if not isinstance(got, int | float | np.floating) or not math.isclose(float(got), expected):
            raise wrong(
                exercise,
                f"accuracy({labels.tolist()}, {predictions.tolist()}) returned {got!r}, expected {expected} "
                "(the share of predictions equal to the label, from 0 to 1).",
            )
    try:
        got = accuracy(labels, labels[:4])
    except (ValueError, IndexError):
        return correct(exercise, "a share between 0 and 1, and mismatched inputs are refused.")
    raise wrong(
        exercise,
        f"8 labels but 4 predictions returned {got!r}; raise ValueError instead (numpy broadcasting or "
        "zip would silently score the wrong pairs).",
    )


def predictor_problems(
    out: dict[str, Any] | None, labels: Any, expected_predictions: Any, expected_confidence: Any
) -> list[str]:
    """What a learner's batch predictor got wrong, one plain line each, from what the pipeline
    returned (``{"label", "prediction", "confidence"}`` columns, concatenated) and the reference."""
    if out is None:
        return ["the pipeline returned no rows: __call__ must return a dict of columns for every batch."]
    missing = [c for c in ("label", "prediction", "confidence") if c not in out]
    if missing:
        hints = {
            "label": "pass the batch's labels through (out['label'] = batch['label']) so predictions stay paired",
            "prediction": "return the predicted digit in a 'prediction' column",
            "confidence": "return the softmax probability of the predicted digit in a 'confidence' column",
        }
        return [f"no {c!r} column: {hints[c]}." for c in missing]
    problems = []
    prediction, confidence = np.asarray(out["prediction"]), np.asarray(out["confidence"], dtype=float)
    if prediction.ndim != 1 or len(prediction) != len(labels):
        return [f"'prediction' has shape {prediction.shape}, one digit per image expected ({len(labels)},)."]
    if not np.array_equal(np.sort(np.asarray(out["label"])), np.sort(np.asarray(labels))):
        problems.append("the 'label' column does not hold the batch's labels.")
    if confidence.shape != prediction.shape:
        problems.append(
            f"'confidence' has shape {confidence.shape}: one number per image, the top probability."
        )
    elif confidence.min() < 0 or confidence.max() > 1:
        problems.append(
            "'confidence' has values outside 0..1: those are logits; apply torch.softmax(logits, dim=1) "
            "and take the largest probability."
        )
    order = np.argsort(np.asarray(out["label"]), kind="stable")
    ref_order = np.argsort(np.asarray(labels), kind="stable")
    if not problems and not np.array_equal(prediction[order], np.asarray(expected_predictions)[ref_order]):
        problems.append(
            "the predictions differ from the model's: feed it batch_format.to_model_input(batch['image']) and "
            "take logits.argmax(dim=1)."
        )
    if not problems and not np.allclose(
        confidence[order], np.asarray(expected_confidence)[ref_order], atol=1e-4
    ):
        problems.append("'confidence' is not the softmax probability of the predicted digit.")
    return problems


def check_batch_predictor(
    predictor: Any, checkpoint: Any, images: Any, labels: Any, exercise: str = "05.2"
) -> None:
    """Runs the learner's class for real: Ray Data ``map_batches`` on a pool of one actor over
    ``images``, then compares each prediction and confidence with the course model's own."""
    import ray.data
    import torch

    if not_attempted(exercise, predictor):
        return None
    if not isinstance(predictor, type) or not any("__call__" in vars(k) for k in predictor.__mro__[:-1]):
        raise wrong(
            exercise,
            "map_batches with an actor pool needs a class (it builds one instance per actor and calls it "
            "per batch): class MyPredictor: def __init__(self, checkpoint): ...; def __call__(self, batch): ...",
        )
    # Rows come back in the order they went in: the comparison pairs each prediction with its own digit
    # (two blocks may otherwise finish in either order, and two digits of one label swap places).
    context = ray.data.DataContext.get_current()
    kept_order = context.execution_options.preserve_order
    context.execution_options.preserve_order = True
    ds = inference.images_dataset(np.asarray(images), np.asarray(labels), blocks=2)
    pool = inference.pool_for(1)  # one actor, with a GPU share where the cluster has GPUs
    scored = ds.map_batches(
        predictor,
        fn_constructor_kwargs={"checkpoint": checkpoint},
        compute=ray.data.ActorPoolStrategy(size=pool.size),
        batch_size=32,
        batch_format="numpy",
        **pool.actor_options(),
    )
    try:
        batches = list(scored.iter_batches(batch_size=None, batch_format="numpy"))
    except Exception as error:  # the learner's class failed inside the actor: say where, in one line
        raise wrong(
            exercise,
            f"your class raised inside the pool's actor: {type(error).__name__}: "
            f"{str(error).strip().splitlines()[-1][:300]}",
        ) from None
    finally:
        context.execution_options.preserve_order = kept_order
    out = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]} if batches and batches[0] else None
    model = checkpoints.load_model(checkpoint)
    with torch.inference_mode():
        probabilities = torch.softmax(model(batch_format.to_model_input(np.asarray(images))), dim=1)
    confidence, expected = probabilities.max(dim=1)
    problems = predictor_problems(out, labels, expected.numpy(), confidence.numpy())
    if problems:
        raise ran_but(exercise, problems)
    return correct(
        exercise,
        f"your class scored {len(labels)} digits in a Ray Data actor pool; mean confidence "
        f"{float(np.mean(out['confidence'])):.3f}, lowest {float(np.min(out['confidence'])):.3f}.",
    )
