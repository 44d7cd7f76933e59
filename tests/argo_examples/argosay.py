"""The part of Argo's test image argoproj/argosay (v2) its examples use, for running them
here: ``echo [message] [file]`` prints the message or writes it to the file, ``exit [code]``
exits with the code, ``sleep <seconds>``."""

import sys
import time
from pathlib import Path

command, *args = sys.argv[1:] or ["echo"]
if command == "echo":
    message = args[0] if args else "hello argo"
    if len(args) > 1:
        Path(args[1]).write_text(message)
    else:
        print(message)
elif command == "exit":
    sys.exit(int(args[0]) if args else 0)
elif command == "sleep":
    time.sleep(float(args[0]))
else:
    sys.exit(f"argosay: {command} is not implemented here")
