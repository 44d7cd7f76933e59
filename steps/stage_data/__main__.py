from steps.common.step_cli import exit_process
from steps.stage_data.step import main

exit_process(main())
