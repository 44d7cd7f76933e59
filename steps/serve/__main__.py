from steps.common.step_cli import exit_process
from steps.serve.step import main

exit_process(main())
