"""meshpar: uneven (heterogeneous) model parallelism for Mesh-TensorFlow."""
from setuptools import find_packages, setup

TEST = [
    "pytest>=7",
    "pytest-xdist>=3",  # `make test` runs the suite in two processes (tests/conftest.py)
    "hypothesis>=6",
    "mock",  # needed by Mesh-TensorFlow's own test modules, which run in our suite
    "tensorflow-probability==0.23.*",
    "nbclient>=0.7",
    "nbformat>=5",
    "ipykernel>=6",
]

setup(
    name="meshpar",
    version="0.1.0",
    description="Heterogeneous (uneven) model + data parallelism on Mesh-TensorFlow",
    long_description=open("README.rst", encoding="utf-8").read(),
    long_description_content_type="text/x-rst",
    packages=find_packages(include=["meshpar", "meshpar.*"]),
    python_requires=">=3.9,<3.12",
    install_requires=[
        "tensorflow-cpu==2.15.1",
        "mesh-tensorflow==0.1.21",
        "numpy<2",
        "scipy",
        "nibabel",
        "tqdm",
        "matplotlib",
    ],
    extras_require={
        "gpu": ["tensorflow[and-cuda]==2.15.1"],
        # phantoms built on the MNI152 template nilearn ships (meshpar.data.template_phantoms)
        "template": ["nilearn>=0.10"],
        "test": TEST,
    },
    entry_points={"console_scripts": ["meshpar=meshpar.cli:main"]},
)
