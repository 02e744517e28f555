"""The head-to-head workloads' FLOP counts, shared by report.py and report_lowp.py."""


def resnet18_forward_flops():
    """Multiply-adds x 2 of the CIFAR ResNet-18's convolutions and classifier, per 32x32 image
    (batch norm, ReLU, additions and pooling are left out: under 1% of the total)."""
    def conv(cin, cout, k, side):  # side: the output's height = width
        return 2 * cin * cout * k * k * side * side

    flops = conv(3, 64, 3, 32)
    cin, side = 64, 32
    for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            side //= s
            flops += conv(cin, planes, 3, side) + conv(planes, planes, 3, side)
            if s != 1 or cin != planes:
                flops += conv(cin, planes, 1, side)
            cin = planes
    return flops + 2 * 512 * 10


def small_cnn_forward_flops():
    return (2 * 1 * 32 * 9 * 28 * 28 + 2 * 32 * 64 * 9 * 14 * 14 + 2 * 64 * 7 * 7 * 128
            + 2 * 128 * 10)


R18 = resnet18_forward_flops()
CONV = 2 * 64 * 64 * 64 * 9 * 32 * 32
MLP = 2 * (784 * 256 + 256 * 10)
# A training step costs ~3 forwards (forward, backward-data, backward-weights).
TRAIN = 3
