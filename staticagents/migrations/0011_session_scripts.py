from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("staticagents", "0010_control_token_hint"),
    ]

    operations = [
        migrations.AddField(
            model_name="rule",
            name="digest",
            field=models.CharField(blank=True, default="", editable=False, max_length=40),
        ),
        migrations.AddField(
            model_name="rulesetstate",
            name="scripts_stamp",
            field=models.CharField(default="", max_length=32),
        ),
        migrations.CreateModel(
            name="SessionScript",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("session", models.CharField(max_length=200, unique=True)),
                (
                    "responses",
                    models.JSONField(help_text="The responses, in the fixture's form"),
                ),
                (
                    "on_exhausted",
                    models.CharField(
                        choices=[
                            ("repeat_last", "repeat the last reply"),
                            ("error", "fail: script exhausted"),
                        ],
                        default="error",
                        max_length=20,
                    ),
                ),
            ],
        ),
    ]
