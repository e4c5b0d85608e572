"""`evalsuite tasks`: list the registered task names (no heavy imports)."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("tasks", help="list the available tasks",
                       description="List evalsuite's own tasks and the lmms-eval tasks shipped with local-data "
                                   "yamls. Any other lmms-eval task name is also accepted by `run`.")
    p.set_defaults(func=main)


def main(args) -> int:
    from evalsuite.lmms import YAML_DIR
    from evalsuite.tasks.registry import LMMS_LOCAL_TASKS, TASKS

    for name, target in TASKS.items():
        print(f"{name:12s} evalsuite  {target}")
    for name, local in LMMS_LOCAL_TASKS.items():
        print(f"{name:12s} lmms-eval  {local.lmms_task}: {local.about}, local data from --data-root")
    print("(mmhal needs its own data, mmhal.data=response_template.json mmhal.image_root=DIR, and a judge: "
          "--judge MODEL_DIR or --judge URL --judge-model NAME; docs/judge.md)")
    print("(objhal needs --data-root COCO 2014 annotations, objhal.data=obj_halbench_300_with_image.jsonl, "
          "objhal.synonyms=synonyms_refine.txt (RLAIF-V's), a spaCy pipeline (objhal.spacy_model, en_core_web_trf) "
          "and a judge; objhal.extractor=chair needs no judge and is not the published protocol; docs/judge.md)")
    print("(any other lmms-eval task, group or tag runs through lmms-eval's evaluator; map its data with "
          "lmms.data.<task> in the eval config)")
    print(f"yamls for `lmms-eval --include_path`: {YAML_DIR}")
    return 0
