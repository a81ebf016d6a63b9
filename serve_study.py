"""Serve a study bundle to participants, or export its responses:
``python serve_study.py study_dir=studies/<name>/v<k> completion_code=<CODE>`` /
``python serve_study.py mode=export study_dir=studies/<name>/v<k>`` /
``python serve_study.py mode=token admin_token_file=<path>``."""

from controversial.cli import command
from controversial.tasks import serve_study

main = command("serve_study", serve_study.run)

if __name__ == "__main__":
    main()
