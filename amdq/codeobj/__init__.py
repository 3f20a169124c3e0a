"""AMDGPU code objects: ELF loading, relocation, kernel descriptors, metadata, compilation, offload bundles and
target ids."""
from .bundle import code_object_for, code_objects_for
from .cache import image_for, program_key
from .compiler import compile
from .descriptor import KernelDescriptor
from .image import KernelInfo, ProgramImage, load_code_object
from .metadata import ArgMeta, KernelMeta, Metadata

__all__ = ["compile", "load_code_object", "image_for", "program_key", "ProgramImage", "KernelInfo",
           "KernelDescriptor", "KernelMeta", "ArgMeta", "Metadata", "code_object_for", "code_objects_for"]
