from steps.common.step_cli import exit_process
from steps.reuse.step import main

exit_process(main())
