"""FinQA's official scoring, transcribed from the benchmark's evaluation script.

Source: czyssrs/FinQA, ``code/evaluate/evaluate.py`` (MIT License, Copyright (c) 2021 Zhiyu
Chen): ``str_to_num``, ``process_row``, ``eval_program`` (execution accuracy),
``equal_program`` (program accuracy: symbolic equivalence with sympy) and
``program_tokenization`` (how a program string becomes the token list the two read). The
logic is kept step for step, quirks included (exact ``round(res, 5) == exe_ans``, table rows
matched by their exact text, the prediction may only use the gold program's arguments);
prints were dropped and the bare ``except`` narrowed to ``Exception``.
"""

from __future__ import annotations

from sympy import simplify

ALL_OPS = ["add", "subtract", "multiply", "divide", "exp", "greater", "table_max",
           "table_min", "table_sum", "table_average"]


def str_to_num(text):
    text = text.replace(",", "")
    try:
        num = float(text)
    except ValueError:
        if "%" in text:
            text = text.replace("%", "")
            try:
                num = float(text)
                num = num / 100.0
            except ValueError:
                num = "n/a"
        elif "const" in text:
            text = text.replace("const_", "")
            if text == "m1":
                text = "-1"
            num = float(text)
        else:
            num = "n/a"
    return num


def process_row(row_in):
    row_out = []
    for num in row_in:
        num = num.replace("$", "").strip()
        num = num.split("(")[0].strip()
        num = str_to_num(num)
        if num == "n/a":
            return "n/a"
        row_out.append(num)
    return row_out


def _op_args(step):
    op = step.split("(")[0].strip("|").strip()
    args = step.split("(")[1].strip("|").strip()
    return op, args.split("|")[0].strip(), args.split("|")[1].strip()


def eval_program(program, table):
    """``(invalid_flag, result)`` for a token list ending in ``EOF``."""
    this_res = "n/a"
    try:
        program = program[:-1]  # remove EOF
        for ind, token in enumerate(program):
            if ind % 4 == 0 and token.strip("(") not in ALL_OPS:
                return 1, "n/a"
            if (ind + 1) % 4 == 0 and token != ")":
                return 1, "n/a"
        program = "|".join(program)
        steps = program.split(")")[:-1]
        res_dict = {}
        for ind, step in enumerate(steps):
            step = step.strip()
            if len(step.split("(")) > 2:
                return 1, this_res
            op, arg1, arg2 = _op_args(step)
            if op in ("add", "subtract", "multiply", "divide", "exp", "greater"):
                if "#" in arg1:
                    arg1 = res_dict[int(arg1.replace("#", ""))]
                else:
                    arg1 = str_to_num(arg1)
                    if arg1 == "n/a":
                        return 1, this_res
                if "#" in arg2:
                    arg2 = res_dict[int(arg2.replace("#", ""))]
                else:
                    arg2 = str_to_num(arg2)
                    if arg2 == "n/a":
                        return 1, this_res
                if op == "add":
                    this_res = arg1 + arg2
                elif op == "subtract":
                    this_res = arg1 - arg2
                elif op == "multiply":
                    this_res = arg1 * arg2
                elif op == "divide":
                    this_res = arg1 / arg2
                elif op == "exp":
                    this_res = arg1**arg2
                else:
                    this_res = "yes" if arg1 > arg2 else "no"
                res_dict[ind] = this_res
            elif "table" in op:
                table_dict = {row[0]: row[1:] for row in table}
                if "#" in arg1:
                    arg1 = res_dict[int(arg1.replace("#", ""))]
                else:
                    if arg1 not in table_dict:
                        return 1, this_res
                    num_row = process_row(table_dict[arg1])
                if num_row == "n/a":
                    return 1, this_res
                if op == "table_max":
                    this_res = max(num_row)
                elif op == "table_min":
                    this_res = min(num_row)
                elif op == "table_sum":
                    this_res = sum(num_row)
                elif op == "table_average":
                    this_res = sum(num_row) / len(num_row)
                res_dict[ind] = this_res
        if this_res not in ("yes", "no", "n/a"):
            this_res = round(this_res, 5)
    except Exception:
        return 1, this_res
    return 0, this_res


def equal_program(program1, program2):
    """Whether the predicted token list ``program2`` equals the gold ``program1``."""
    sym_map = {}
    program1 = "|".join(program1[:-1])
    steps = program1.split(")")[:-1]
    sym_ind = 0
    step_dict_1 = {}
    for ind, step in enumerate(steps):
        step = step.strip()
        assert len(step.split("(")) <= 2
        op, arg1, arg2 = _op_args(step)
        step_dict_1[ind] = step
        if "table" in op:
            if step not in sym_map:
                sym_map[step] = "a" + str(sym_ind)
                sym_ind += 1
        else:
            for arg in (arg1, arg2):
                if "#" not in arg and arg not in sym_map:
                    sym_map[arg] = "a" + str(sym_ind)
                    sym_ind += 1

    step_dict_2 = {}
    try:
        program2 = program2[:-1]
        for ind, token in enumerate(program2):
            if ind % 4 == 0 and token.strip("(") not in ALL_OPS:
                return False
            if (ind + 1) % 4 == 0 and token != ")":
                return False
        program2 = "|".join(program2)
        steps = program2.split(")")[:-1]
        for ind, step in enumerate(steps):
            step = step.strip()
            if len(step.split("(")) > 2:
                return False
            op, arg1, arg2 = _op_args(step)
            step_dict_2[ind] = step
            if "table" in op:
                if step not in sym_map:
                    return False
            else:
                for arg in (arg1, arg2):
                    if "#" not in arg:
                        if arg not in sym_map:
                            return False
                    elif int(arg.strip("#")) >= ind:
                        return False
    except Exception:
        return False

    def symbol_recur(step, step_dict):
        step = step.strip()
        op, arg1, arg2 = _op_args(step)
        if "table" in op:
            return sym_map[step]
        parts = []
        for arg in (arg1, arg2):
            if "#" in arg:
                parts.append(symbol_recur(step_dict[int(arg.replace("#", ""))], step_dict))
            else:
                parts.append(sym_map[arg])
        sign = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "exp": "**",
                "greater": ">"}[op]
        return "( " + parts[0] + " " + sign + " " + parts[1] + " )"

    steps = program1.split(")")[:-1]
    sym_prog1 = simplify(symbol_recur(steps[-1], step_dict_1), evaluate=False)
    try:
        steps = program2.split(")")[:-1]
        sym_prog2 = simplify(symbol_recur(steps[-1], step_dict_2), evaluate=False)
    except Exception:
        return False
    return sym_prog1 == sym_prog2


def program_tokenization(original_program):
    original_program = original_program.split(", ")
    program = []
    for tok in original_program:
        cur_tok = ""
        for c in tok:
            if c == ")" and cur_tok != "":
                program.append(cur_tok)
                cur_tok = ""
            cur_tok += c
            if c in ["(", ")"]:
                program.append(cur_tok)
                cur_tok = ""
        if cur_tok != "":
            program.append(cur_tok)
    program.append("EOF")
    return program
