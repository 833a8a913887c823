"""Package discovery lives here only because pyproject.toml cannot both *find*
packages and *add* the two mapped data folders (tasks/, site_templates/)."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["benchclaw", "benchclaw.*"])
      + ["benchclaw._tasks", "benchclaw._site_templates"])
