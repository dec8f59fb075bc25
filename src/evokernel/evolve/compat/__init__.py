"""Stand-ins for other projects' modules that users' evaluators import (see openevolve/)."""
