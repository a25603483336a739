"""`make bench`: wmo-lake's speed and size, as ratios against plain-Python anchors measured in the
same run (the machine is shared and noisy, so a bare time says little). See `python -m bench -h`.
"""
