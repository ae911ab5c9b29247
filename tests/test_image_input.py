"""uint8 NHWC images → float NCHW for foreign encoders: the numbers, --normalize, the adapter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from idaudit.core.errors import IdauditError
from idaudit.loading.image_input import NORMALIZATIONS, ImageAdapter, parse_normalize, to_encoder_input
from idaudit.models.encoders import embed

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

# two 1 × 2 images: pixels (0, 128, 51) and (255, 0, 255), then all 255
IMAGES = np.array([[[[0, 128, 51], [255, 0, 255]]], [[[255, 255, 255], [255, 255, 255]]]],
                  dtype=np.uint8)


def test_imagenet_normalisation_gives_the_known_numbers():
    out = to_encoder_input(IMAGES, parse_normalize("imagenet"))
    assert out.dtype == torch.float32 and out.shape == (2, 3, 1, 2)  # NCHW
    # (v/255 − mean_c) / std_c, worked out by hand
    expected = [[-2.1179039301, 2.2489082969],   # R: 0, 255
                [0.2051820728, -2.0357142857],   # G: 128, 0
                [-0.9155555556, 2.64]]           # B: 51, 255
    np.testing.assert_allclose(out[0, :, 0, :].numpy(), expected, rtol=0, atol=2e-6)
    np.testing.assert_allclose(out[1, :, 0, 0].numpy(), [2.2489082969, 2.4285714286, 2.64],
                               rtol=0, atol=2e-6)
    # exactly the float32 arithmetic x/255, − mean, / std
    x = IMAGES.astype(np.float32).transpose(0, 3, 1, 2) / np.float32(255)
    m, s = (np.asarray(v, dtype=np.float32).reshape(1, 3, 1, 1) for v in IMAGENET)
    np.testing.assert_array_equal(out.numpy(), (x - m) / s)


def test_none_keeps_x_over_255_in_the_unit_interval():
    out = to_encoder_input(torch.from_numpy(IMAGES), None)
    np.testing.assert_array_equal(out[0, :, 0, 0].numpy(), np.float32([0, 128, 51]) / 255)
    assert out.min() == 0.0 and out.max() == 1.0
    assert out.is_contiguous()


@pytest.mark.parametrize("text,want", [
    ("imagenet", IMAGENET),
    (" ImageNet ", IMAGENET),
    ("none", None),
    ("0.5,0.5", ((0.5,) * 3, (0.5,) * 3)),
    ("0.485:0.456:0.406,0.229:0.224:0.225", IMAGENET),
    ("0:0.1:-0.2, 2", ((0.0, 0.1, -0.2), (2.0, 2.0, 2.0))),
    ("inception", ((0.5,) * 3, (0.5,) * 3)),
])
def test_parse_normalize(text, want):
    assert parse_normalize(text) == want


def test_presets_are_three_channels_with_positive_std():
    for mean, std in NORMALIZATIONS.values():
        assert len(mean) == len(std) == 3 and min(std) > 0


@pytest.mark.parametrize("text,fragment", [
    ("imagnet", "normalize must be imagenet, clip, inception, none, or MEAN,STD"),
    ("0.5", "normalize must be"),
    ("0.5,0.5,0.5", "normalize must be"),
    ("0.5,", "normalize must be"),
    ("a,0.5", "the mean 'a' is not a number"),
    ("0.5,0.2:0.2", "the std has 2 numbers"),
    ("0.5,0", "the std must be at least 1e-06"),
    ("0.5,-1:1:1", "the std must be at least 1e-06"),
    ("nan,1", "must be finite"),
])
def test_parse_errors_are_one_line_exit_2(text, fragment):
    with pytest.raises(IdauditError) as info:
        parse_normalize(text)
    assert info.value.exit_code == 2
    assert fragment in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("bad,fragment", [
    (np.zeros((2, 4, 4, 3), dtype=np.float32), "uint8 of shape (N, H, W, 3), got float32"),
    (np.zeros((2, 3, 4, 4), dtype=np.uint8), "got uint8 (2, 3, 4, 4)"),
    (np.zeros((4, 4, 3), dtype=np.uint8), "got uint8 (4, 4, 3)"),
    ([[0, 1]], "got list"),
])
def test_wrong_images_are_refused(bad, fragment):
    with pytest.raises(IdauditError) as info:
        to_encoder_input(bad, None)
    assert fragment in str(info.value) and info.value.exit_code == 2


def test_adapter_feeds_a_torch_module_chunk_by_chunk():
    torch.manual_seed(0)
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten())
    images = np.random.default_rng(0).integers(0, 256, (10, 5, 5, 3), dtype=np.uint8)
    norm = parse_normalize("imagenet")
    h = embed(ImageAdapter(conv, norm), images, chunk=3)  # four chunks: 3 + 3 + 3 + 1
    with torch.no_grad():
        want = conv(to_encoder_input(images, norm))
    assert h.shape == (10, 36)
    torch.testing.assert_close(h, want, rtol=0, atol=1e-6)  # chunks: other conv kernels
    # a plain callable works too (no parameters: the CPU)
    h2 = embed(ImageAdapter(lambda x: x.mean((2, 3)), None), images)
    np.testing.assert_allclose(h2.numpy(), images.mean((1, 2)) / 255, rtol=1e-5)


def test_adapter_runs_a_hugging_face_vit_in_eval_mode():
    transformers = pytest.importorskip("transformers")

    class CLS(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            cfg = transformers.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32, image_size=32, patch_size=8,
                                         hidden_dropout_prob=0.5)
            self.vit = transformers.ViTModel(cfg, add_pooling_layer=False)

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.vit(pixel_values=pixel_values).last_hidden_state[:, 0]

    model = CLS()
    model.train()
    images = np.random.default_rng(1).integers(0, 256, (6, 32, 32, 3), dtype=np.uint8)
    adapter = ImageAdapter(model, IMAGENET)
    h = embed(adapter, images)
    assert model.training  # the mode is restored after
    model.eval()
    with torch.no_grad():
        want = model(to_encoder_input(images, IMAGENET))
    assert h.shape == (6, 16)
    torch.testing.assert_close(h, want, rtol=0, atol=0)  # dropout off: eval mode was used


def test_an_encoder_failing_on_images_is_told_the_input_it_was_given():
    """The one-line error names what the encoder received (float N×3×H×W), not the uint8
    N×H×W×3 images the world holds."""
    images = np.zeros((5, 8, 6, 3), dtype=np.uint8)
    adapter = ImageAdapter(torch.nn.Linear(4, 4), parse_normalize("imagenet"))
    with pytest.raises(IdauditError) as info:
        embed(adapter, images)
    msg = str(info.value)
    assert msg.startswith("the encoder failed on float images of shape (5, 3, 8, 6), "
                          "normalised: ") and "\n" not in msg
    assert info.value.exit_code == 2
