#!/usr/bin/env python3
"""Validates generated outputs against their JSON Schemas (Debian's
python3-jsonschema). Usage: validate_json_schema.py CASES.json, where the file
holds [{"schema": {...}, "output": "<text>"}, ...]. Prints one line per
failure and exits 1 if there is any."""
import json
import sys

import jsonschema


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    failures = 0
    for i, case in enumerate(cases):
        try:
            value = json.loads(case["output"])
            validator = jsonschema.validators.validator_for(case["schema"], default=jsonschema.Draft202012Validator)
            validator(case["schema"]).validate(value)
        except (ValueError, jsonschema.ValidationError) as e:
            failures += 1
            print(f"case {i}: {type(e).__name__}: {str(e).splitlines()[0]} | output {case['output']!r}")
    print(f"{len(cases) - failures}/{len(cases)} valid")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
