"""Stand-in for the get-pip.py bootstrap that ansible-test downloads into its cache.

ansible-test creates its sanity venvs without pip and fetches get-pip.py from a host outside the
package registries, which these machines cannot reach. This script does the same job with what every
CPython has: ensurepip, then the pip version ansible-test asks for from the configured index.
`make sanity` copies it to ~/.ansible/test/cache/get_pip_<version>.py.
"""
import ensurepip
import os
import subprocess
import sys

# ensurepip points PIP_CONFIG_FILE at /dev/null in this process; the real install below must see the
# machine's pip configuration (index, certificates) again.
environment = dict(os.environ)
ensurepip.bootstrap(upgrade=True)
requirements = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet"] + requirements,
                      env=environment)
