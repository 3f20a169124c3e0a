"""The AM driver: boots and drives an AMD GPU over PCI without the amdgpu kernel module."""
