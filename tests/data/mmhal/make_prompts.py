"""Renders the released MMHal judge template (LLaVA-RLHF Eval/eval_gpt_mmhal.py `template`, read from the
file with ast: the script itself needs an API) on template_subset.json with constructed answers, exactly as
the released loop does: template.format(', '.join(image_content), question, gt_answer, model_answer).

    python make_prompts.py /path/to/LLaVA-RLHF/Eval/eval_gpt_mmhal.py > reference/prompts.json
"""
import ast
import json
import sys
from pathlib import Path

ANSWERS = ["A yellow cap.", "Nobody {sits} there.", "", "There are 3 cats 🐱.\nAnd a dog.",
           "Rating: 6", "It is on the left of the table.", "Outdoors, \\ near a lake.", "I cannot tell."]

tree = ast.parse(Path(sys.argv[1]).read_text())
template = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "template")
records = json.loads((Path(__file__).parent / "template_subset.json").read_text())
out = [{"index": i, "answer": a, "prompt": template.format(", ".join(r["image_content"]), r["question"], r["gt_answer"], a)}
       for i, (r, a) in enumerate(zip(records, ANSWERS))]
print(json.dumps(out, indent=1, ensure_ascii=False))
