from steps.common.step_cli import exit_process
from steps.serve_check.step import main

exit_process(main())
