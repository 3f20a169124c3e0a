"""The simulated PCI function (SIMPCI+AMD): a GPU the AM driver cannot tell from hardware, built on the
simulated GPU (memory, MMU, command processor, SDMA, shader core) with config space, BARs, the IP discovery
table in VRAM and a register file whose side effects are the simulated PSP, SMU, GMC, IH ... (one
`SimPart` per block, see part.py)."""
