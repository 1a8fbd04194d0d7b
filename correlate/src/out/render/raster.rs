//! A drawing ([`Shape`]s) rasterised to a PNG image: rectangles filled, labels drawn with a
//! TrueType font rasterised by `fontdue` (the system's DejaVu Sans, Liberation Sans or Noto
//! Sans, or the file `HPCVIEW_FONT` names). Without a font the labels are left out, and the
//! caller says so.

use std::io::{self, Write};

use fontdue::{Font, FontSettings};

use crate::out::render::timeline::Shape;

/// Where distributions put a plain sans-serif font.
const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
];

/// Pixel size of labels (the SVG's `font-size`).
const FONT_PX: f32 = 12.0;

/// The font for labels: `HPCVIEW_FONT`, else the first of `FONT_PATHS` that reads.
pub fn system_font() -> Option<Font> {
    let mut paths: Vec<String> = std::env::var("HPCVIEW_FONT").into_iter().collect();
    paths.extend(FONT_PATHS.map(String::from));
    paths
        .into_iter()
        .filter_map(|p| std::fs::read(p).ok())
        .find_map(|bytes| Font::from_bytes(bytes, FontSettings::default()).ok())
}

/// The drawing on white as RGB rows; labels only with a `font`.
pub fn raster(shapes: &[Shape], size: (u32, u32), font: Option<&Font>) -> Vec<u8> {
    let mut canvas = Canvas {
        pixels: vec![0xff; size.0 as usize * size.1 as usize * 3],
        width: size.0 as usize,
        height: size.1 as usize,
    };
    for shape in shapes {
        match (shape, font) {
            (&Shape::Rect { x, y, w, h, rgb }, _) => canvas.fill(x, y, w, h, rgb),
            (
                Shape::Text {
                    x,
                    y,
                    text,
                    centred,
                    ..
                },
                Some(font),
            ) => {
                let width: f32 = text
                    .chars()
                    .map(|c| font.metrics(c, FONT_PX).advance_width)
                    .sum();
                let start = if *centred {
                    *x as f32 - width / 2.0
                } else {
                    *x as f32
                };
                canvas.text(font, start, *y as f32, text);
            }
            (Shape::Text { .. }, None) => {}
        }
    }
    canvas.pixels
}

/// Write the drawing as a PNG image (8-bit RGB).
pub fn write_png(
    shapes: &[Shape],
    size: (u32, u32),
    font: Option<&Font>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut encoder = png::Encoder::new(out, size.0, size.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(io::Error::other)?;
    writer
        .write_image_data(&raster(shapes, size, font))
        .map_err(io::Error::other)?;
    writer.finish().map_err(io::Error::other)
}

struct Canvas {
    pixels: Vec<u8>,
    width: usize,
    height: usize,
}

impl Canvas {
    fn fill(&mut self, x: u32, y: u32, w: u32, h: u32, rgb: [u8; 3]) {
        for row in (y as usize)..((y + h) as usize).min(self.height) {
            for col in (x as usize)..((x + w) as usize).min(self.width) {
                let at = (row * self.width + col) * 3;
                self.pixels[at..at + 3].copy_from_slice(&rgb);
            }
        }
    }

    /// Draw `text` in black from `x` on baseline `y`, each glyph's coverage blended in.
    fn text(&mut self, font: &Font, mut x: f32, y: f32, text: &str) {
        for c in text.chars() {
            let (m, coverage) = font.rasterize(c, FONT_PX);
            let left = x.round() as i64 + m.xmin as i64;
            let top = y.round() as i64 - m.ymin as i64 - m.height as i64;
            for (i, &alpha) in coverage.iter().enumerate() {
                let (col, row) = (left + (i % m.width) as i64, top + (i / m.width) as i64);
                self.darken(col, row, alpha);
            }
            x += m.advance_width;
        }
    }

    /// Blend black at `alpha` (0-255) into the pixel at (`col`, `row`), if it is inside.
    fn darken(&mut self, col: i64, row: i64, alpha: u8) {
        if col < 0 || row < 0 || col as usize >= self.width || row as usize >= self.height {
            return;
        }
        let at = (row as usize * self.width + col as usize) * 3;
        for v in &mut self.pixels[at..at + 3] {
            *v = (*v as u32 * (255 - alpha as u32) / 255) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rectangles_fill_and_labels_darken_only_with_a_font() {
        let shapes = [
            Shape::Rect {
                x: 1,
                y: 1,
                w: 2,
                h: 1,
                rgb: [10, 20, 30],
            },
            Shape::Text {
                x: 0,
                y: 14,
                text: "Wy".into(),
                centred: false,
                full: None,
            },
        ];
        let plain = raster(&shapes, (20, 20), None);
        assert_eq!(
            &plain[(20 + 1) * 3..(20 + 3) * 3],
            &[10, 20, 30, 10, 20, 30]
        );
        assert_eq!(plain.iter().filter(|&&v| v != 0xff).count(), 6);
        let Some(font) = system_font() else {
            // scripts/install-timeline installs one; CI must have it.
            assert!(
                std::env::var("CI").is_err(),
                "no font: run scripts/install-timeline"
            );
            eprintln!("no system font: the label half of this test is skipped");
            return;
        };
        let drawn = raster(&shapes, (20, 20), Some(&font));
        let dark = |rows: std::ops::Range<usize>| {
            rows.flat_map(|r| (0..20).map(move |c| (r, c)))
                .filter(|&(r, c)| drawn[(r * 20 + c) * 3] < 0x80)
                .count()
        };
        // "W" above the baseline, "y"'s tail below it.
        assert!(dark(4..14) >= 10, "{}", dark(4..14));
        assert!(dark(14..18) >= 1);
    }
}
