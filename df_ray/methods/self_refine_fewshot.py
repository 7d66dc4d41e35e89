"""Self-Refine's few-shot feedback-and-fix prompts, one per task kind.

In the style of madaan/self-refine's ``data/prompt/gsm/feedback.txt`` (read by
``src/gsm/feedback.py``): each example is a solution, the instruction "There is an error in
the solution above ... check if everything looks good.", a step-by-step review marking each
step "looks good" or "wrong! ...", then either "Okay! Here is the rewrite:" and the fixed
solution, or "There is no error in the solution! It is correct! Here is the rewrite (for the
sake of completeness):" and the same solution, then ``### END ###``. The examples are ours,
written for each benchmark's answer format (the reference's are Python programs for GSM8K),
one wrong and one correct solution per kind, so that the model learns both verdicts. Each
answer kind holds its own (``FEEDBACK_EXAMPLES`` in its ``df_ray.core.parsing`` module,
given as ``AnswerWords.feedback_examples``): this module names no kind.
"""

from __future__ import annotations

from collections.abc import Sequence

from df_ray.core.parsing import answer_words

END = "### END ###"
REWRITE = "Okay! Here is the rewrite:"
CORRECT_REWRITE = ("There is no error in the solution! It is correct! Here is the rewrite "
                   "(for the sake of completeness):")
INSTRUCTION = ("# There is an error in the solution above because of lack of understanding of "
               "the question. What is the error? To find the error, go through semantically "
               "complete steps of the solution, and check if everything looks good.")
REVIEW_START = "# Let us go through the error and check step-by-step"


def _example(question: str, solution: str, review: list[tuple[str, str]],
             fixed: str | None) -> str:
    steps = "\n\n# Let's check the other parts\n".join(f"{step}\n# {verdict}"
                                                         for step, verdict in review)
    verdict = (f"{REWRITE}\n\n{fixed}" if fixed is not None
               else f"{CORRECT_REWRITE}\n\n{solution}")
    return (f"Question:\n{question}\n\nSolution:\n{solution}\n\n{INSTRUCTION}\n\n"
            f"{REVIEW_START}\n{steps}\n\n{verdict}\n\n{END}")


def _query(question: str, solution: str, instructions: str) -> str:
    return (f"Question:\n{question.strip()}\n\nSolution:\n{solution.strip() or '(none)'}\n\n"
            f"{INSTRUCTION}\n# The rewrite must end as the question asks: "
            f"{' '.join(instructions.split())}")


def feedback_prompt(kind: str, question: str, solution: str, instructions: str,
                    history: Sequence[tuple[str, str]] = ()) -> str:
    """The few-shot prompt for ``kind`` (a kind df_ray does not ship: the examples its
    module's ``words`` give, ``AnswerWords.feedback_examples``; none: no shots), then each
    earlier (solution, feedback reply) of this sample as one more example (the reference's
    ``GSMFeedback.update_prompt`` appends every one), then the question, the solution to
    review and the instruction; the rewrite must end as the task's ``instructions`` say."""
    examples = answer_words(kind).feedback_examples
    shots = "".join(f"{_example(*e)}\n\n" for e in examples)
    done = "".join(f"{_query(question, sol, instructions)}\n\n"
                   f"{reply.split('### END')[0].strip()}\n\n{END}\n\n"
                   for sol, reply in history)
    return f"{shots}{done}{_query(question, solution, instructions)}"


def split_feedback(text: str) -> tuple[str, str | None]:
    """(feedback, fixed solution or None): the reply up to ``### END``, split at the rewrite
    line ("... Here is the rewrite ...:")."""
    text = text.split("### END")[0]
    i = text.find("Here is the rewrite")
    if i < 0:
        return text.strip(), None
    j = text.find(":", i)
    j = text.find("\n", i) if j < 0 else j + 1
    if j <= 0:
        return text[:i].strip(), None
    fixed = text[j:].strip()
    return text[:i].strip(), fixed or None


def says_correct(feedback: str) -> bool:
    """The reference's stop rule: "it is correct" anywhere in the feedback (any case)."""
    return "it is correct" in feedback.lower()
