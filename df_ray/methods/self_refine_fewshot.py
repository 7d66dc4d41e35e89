"""Self-Refine's few-shot feedback-and-fix prompts, one per task kind.

In the style of madaan/self-refine's ``data/prompt/gsm/feedback.txt`` (read by
``src/gsm/feedback.py``): each example is a solution, the instruction "There is an error in
the solution above ... check if everything looks good.", a step-by-step review marking each
step "looks good" or "wrong! ...", then either "Okay! Here is the rewrite:" and the fixed
solution, or "There is no error in the solution! It is correct! Here is the rewrite (for the
sake of completeness):" and the same solution, then ``### END ###``. The examples are ours,
written for each benchmark's answer format (the reference's are Python programs for GSM8K),
one wrong and one correct solution per kind, so that the model learns both verdicts.
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

_MATH = [
    ("Solve the following math problem.\n\nA store sells pencils at 3 for $1. How many dollars "
     "do 27 pencils cost?",
     "27 pencils is 27 * 3 = 81 groups of three.\nEach group costs $1, so the cost is 81.\n"
     "\\boxed{81}",
     [("27 pencils is 27 * 3 = 81 groups of three.",
       "wrong! The number of groups of three is 27 / 3 = 9, not 27 * 3."),
      ("Each group costs $1, so the cost is 81.",
       "wrong! With 9 groups at $1 each the cost is 9 dollars.")],
     "27 pencils is 27 / 3 = 9 groups of three.\nEach group costs $1, so the cost is 9 "
     "dollars.\n\\boxed{9}"),
    ("Solve the following math problem.\n\nWhat is the value of $x$ if $2x + 6 = 20$?",
     "Subtract 6 from both sides: 2x = 14.\nDivide by 2: x = 7.\n\\boxed{7}",
     [("Subtract 6 from both sides: 2x = 14.", "looks good"),
      ("Divide by 2: x = 7.", "looks good"),
      ("\\boxed{7}", "looks good")],
     None),
]

_CHOICE = [
    ("Answer the following multiple-choice question (options A-D).\n\nWhich gas makes up "
     "most of Earth's atmosphere?\n(A) Oxygen\n(B) Carbon dioxide\n(C) Nitrogen\n(D) Argon",
     "Living things breathe oxygen, so it must be the most abundant gas.\nAnswer: A",
     [("Living things breathe oxygen, so it must be the most abundant gas.",
       "wrong! Being needed for breathing says nothing about abundance. Dry air is about 78% "
       "nitrogen and 21% oxygen; argon is under 1% and carbon dioxide far less."),
      ("Answer: A", "wrong! The most abundant gas is nitrogen, option C.")],
     "Dry air is about 78% nitrogen, 21% oxygen, under 1% argon and far less carbon dioxide, "
     "so nitrogen makes up most of it.\nAnswer: C"),
    ("Answer the following multiple-choice question (options A-D).\n\nWhat is the SI unit of "
     "force?\n(A) Joule\n(B) Newton\n(C) Watt\n(D) Pascal",
     "Force is measured in newtons (1 N = 1 kg m/s^2); the joule is energy, the watt power "
     "and the pascal pressure.\nAnswer: B",
     [("Force is measured in newtons (1 N = 1 kg m/s^2).", "looks good"),
      ("The joule is energy, the watt power and the pascal pressure.", "looks good"),
      ("Answer: B", "looks good")],
     None),
]

_CODE = [
    ("Complete the following Python function.\n\n```python\ndef count_evens(nums: list) -> "
     "int:\n    \"\"\"Return how many numbers in nums are even.\n    >>> count_evens([1, 2, "
     "4])\n    2\n    \"\"\"\n```",
     "```python\ndef count_evens(nums: list) -> int:\n    count = 0\n    for n in nums:\n"
     "        if n % 2 == 1:\n            count += 1\n    return count\n```",
     [("count = 0\nfor n in nums:", "looks good"),
      ("if n % 2 == 1:\n    count += 1",
       "wrong! This counts the odd numbers. count_evens([1, 2, 4]) returns 1, not 2. The "
       "test must be n % 2 == 0."),
      ("return count", "looks good")],
     "```python\ndef count_evens(nums: list) -> int:\n    count = 0\n    for n in nums:\n"
     "        if n % 2 == 0:\n            count += 1\n    return count\n```"),
    ("Complete the following Python function.\n\n```python\ndef last_char(s: str) -> str:\n"
     "    \"\"\"Return the last character of s, or '' for an empty string.\n    >>> "
     "last_char('abc')\n    'c'\n    \"\"\"\n```",
     "```python\ndef last_char(s: str) -> str:\n    return s[-1] if s else ''\n```",
     [("return s[-1] if s else ''",
       "looks good: last_char('abc') is 'c' and last_char('') is ''")],
     None),
]

_FINQA = [
    ("Read the following excerpt of a financial report and answer the question.\n\nTable:\n"
     "| | 2019 | 2018 |\n| revenue | 1200 | 1000 |\n\nQuestion: what was the percentage "
     "change in revenue from 2018 to 2019?",
     "The change is 1200 - 1000 = 200; divided by the 2019 revenue.\n"
     "Answer: subtract(1200, 1000), divide(#0, 1200)",
     [("The change is 1200 - 1000 = 200.", "looks good"),
      ("divided by the 2019 revenue: divide(#0, 1200)",
       "wrong! A percentage change is relative to the earlier year, 2018: divide by 1000.")],
     "The change is 1200 - 1000 = 200; relative to the 2018 revenue of 1000 that is 0.2.\n"
     "Answer: subtract(1200, 1000), divide(#0, 1000)"),
    ("Read the following excerpt of a financial report and answer the question.\n\nTable:\n"
     "| | 2019 |\n| net income | 300 |\n| shares outstanding | 150 |\n\nQuestion: what was "
     "the net income per share in 2019?",
     "Net income per share is net income divided by shares outstanding: 300 / 150 = 2.\n"
     "Answer: divide(300, 150)",
     [("Net income per share is net income divided by shares outstanding.", "looks good"),
      ("Answer: divide(300, 150)", "looks good: both numbers are from the 2019 column")],
     None),
]

_LABEL = [
    ("Classify whether the clause contains a non-compete obligation. Allowed labels: Yes, "
     "No.\n\nClause: \"The Supplier shall keep all Customer data confidential for five years "
     "after termination.\"",
     "The clause restricts the Supplier after termination, which is what a non-compete "
     "does.\nAnswer: Yes",
     [("The clause restricts the Supplier after termination.", "looks good"),
      ("which is what a non-compete does.",
       "wrong! It restricts disclosing data (confidentiality), not competing with the "
       "Customer. A non-compete forbids working for or becoming a competitor.")],
     "The clause is a confidentiality obligation: it restricts disclosing data, not "
     "competing.\nAnswer: No"),
    ("Classify whether the clause contains a non-compete obligation. Allowed labels: Yes, "
     "No.\n\nClause: \"During the term and for one year after, the Distributor shall not sell "
     "products that compete with the Products.\"",
     "The Distributor may not sell competing products during the term and for one year "
     "after: a non-compete obligation.\nAnswer: Yes",
     [("The Distributor may not sell competing products during the term and after.",
       "looks good"),
      ("Answer: Yes", "looks good: Yes is one of the allowed labels")],
     None),
]

EXAMPLES = {"math": _MATH, "choice": _CHOICE, "code": _CODE, "finqa": _FINQA, "label": _LABEL}


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
    examples = EXAMPLES[kind] if kind in EXAMPLES else answer_words(kind).feedback_examples
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
